"""The CPU attention kernel (posjax/attention/native.py) built from another C++ source, beside
the installed one, for the A/B benches (bench/step_ab.py, bench/kernel_ab.py)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile

import jax

from posjax.attention import native


def kernel_target(source: str) -> str:
    """Build the CPU attention kernel from `source` with its FFI targets renamed (a prefix
    from the source's hash), register them, and return the forward's target name."""
    with open(source) as f:
        text = f.read()
    prefix = "ab" + hashlib.sha256(text.encode()).hexdigest()[:10] + "_"
    target = prefix + native.TARGET
    directory = tempfile.mkdtemp(prefix="posjax_step_ab_kernel_")
    renamed, library = os.path.join(directory, "kernel.cc"), os.path.join(directory, "kernel.so")
    with open(renamed, "w") as f:
        f.write(text.replace(native.TARGET, target))
    subprocess.run([os.environ.get("CXX", "c++"), *native._flags(),
                    f"-I{jax.ffi.include_dir()}", renamed, "-o", library], check=True)
    loaded = ctypes.cdll.LoadLibrary(library)
    for name in (target, target + "_backward"):
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(loaded, name)),
                                    platform="cpu")
    return target
