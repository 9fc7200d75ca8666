"""A compiled CPU kernel for bidirectional attention, which `rows` runs when no position term
enters the logits (RoPE after its rotation, NoPE, absolute schemes), and also the factored
terms (`content_factors`: Transformer-XL), as plain attention of [q' | q_extra] over
[k | k_extra] with a key dim wider than the values': padding, packed segments and a local
layer's window by skipping or masking the tiles that need it.

On XLA:CPU the products of a rows step, with their softmax, ran at about half of torch's
CPU flash attention on AVX-512 Xeons (bench/long_attention_peer.md): XLA's dots there, and
its logits round-tripping through memory between the dot, max, exp and sum fusions.
cpu_attention.cc is flash attention written for the CPU: one (batch, head) pair and query
block per thread, an online softmax over key blocks whose logits stay in cache, packed key
panels, vectorized exp. It runs as an XLA FFI custom call inside the jitted program. Under
a mesh XLA cannot split a custom call: it gathers the inputs and runs it whole.

Built on first use with the machine's C++ compiler (`c++`, -O3 -march=native) against
jaxlib's FFI headers, into `$XDG_CACHE_HOME/posjax/cpu_kernels` (default ~/.cache/...),
keyed by the source, flags, compiler and CPU, under a file lock so parallel processes build
it once. No compiler, a failed build or `POSJAX_CPU_KERNEL=0` in the environment: rows runs
its XLA step instead (the same numbers), with one INFO line.

Float32, head_dim 8, 16, 32, 64 or 128 (8 and 16: small models such as the algorithmic
benchmark's). q and k may have another head dim than v, D + F for a factored term: a multiple
of 8 up to MAX_KEY_DIM, run at a run-time width (the q.k loop over it, dQ and dK in column
chunks of the compiled widths; the plain head dims' code is unchanged). Its factors stay in
arrays of their own (`attention(..., q_extra=, k_extra=)`, k_extra shared by the heads or
not): the kernel gathers a pair's rows of both, where XLA's concatenation of them into
[B, L, H, D + F] copies cost as much as the kernel itself (XL at 8 heads of 8, d_R 64). The
forward keeps each row's log-sum-exp; the backward is flash attention's, a second kernel
that recomputes each tile's probabilities from it (O(L) memory in both directions).

The same library serves two ops of the model's other layers on one CPU device
(posjax/models/cpu_ops.py): `transpose` (the weight gradients' operands) and `layer_norm` (one
pass per row, forward and backward).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from typing import Optional

import filelock
import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from posjax import user_cache

ENV = "POSJAX_CPU_KERNEL"  # 0 / off / false / no: never use the kernel
HEAD_DIMS = (8, 16, 32, 64, 128)
TARGET = "posjax_cpu_attention"
TRANSPOSE = "posjax_cpu_transpose"  # the library's other targets: `transpose`,
LAYER_NORM = "posjax_cpu_layer_norm"  # and `layer_norm` (with its "_backward")
# rows per task of the layer norm's backward: its scale and bias gradients come back as one
# partial sum per strip of this many rows, in a fixed order (the same sums on any thread count)
LAYER_NORM_ROWS = 64
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_attention.cc")
# Key blocks of the online softmax: a 128 x 1024 step's logits (512 KiB) fit the L2 of the
# CPUs measured, and at 8192 keys took 0.86x the time of 512-key blocks, 0.52x of whole rows.
BLOCK_Q, BLOCK_K = 128, 1024
# A local layer's tiles: small, so that the tiles its window skips are most of them.
WINDOW_BLOCK_Q, WINDOW_BLOCK_K = 64, 64
# Only position hooks that act on q, k and v before the product (and on the output after):
# everything else changes the logits, which the kernel does not compute.
PLAIN_HOOKS = ("rotate", "rotate_values")
# ... and a term given as factors, which it computes as a wider q.k (FACTORED_HOOK).
FACTORED_HOOK = "content_factors"
MAX_KEY_DIM = 512  # q and k's head dim when it differs from v's: a multiple of 8 up to this


def enabled(environ=os.environ) -> bool:
    return environ.get(ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def key_dim_supported(key_dim: int, dim: int) -> bool:
    """Whether the kernel takes q and k of head dim key_dim with v of head dim dim."""
    return dim in HEAD_DIMS and (key_dim == dim or (
        8 <= key_dim <= MAX_KEY_DIM and key_dim % 8 == 0))


def key_dim(scheme, params, q, k, q_pos, k_pos) -> int:
    """The head dim of q and k the kernel would take for this scheme: D, or D + F for a
    scheme with `content_factors` (the width of its factors, from their shapes alone)."""
    if scheme.content_factors is None:
        return q.shape[-1]
    _, q_extra, _ = jax.eval_shape(
        lambda *a: scheme.content_factors(*a), params, q, k, q_pos, k_pos)
    return q.shape[-1] + q_extra.shape[-1]


def usable(scheme, q, *, causal, logn_length, sinks, key_dim: Optional[int] = None) -> bool:
    """Whether attention of q over keys with these arguments is what the kernel computes, and
    the kernel is built for this process. `scheme` is bound (Scheme), q [B, L, H, D]. Any
    kv_mask, segment ids and window: the kernel masks the tiles that need it. A scheme with
    `content_factors` needs `key_dim` (`key_dim(...)`: D + F) to be one the kernel takes."""
    hooks = set(scheme.attention_hooks)
    if FACTORED_HOOK in hooks:
        if key_dim is None or not key_dim_supported(key_dim, q.shape[-1]):
            return False
        hooks.discard(FACTORED_HOOK)
    return (jax.default_backend() == "cpu" and q.dtype == jnp.float32
            and q.shape[-1] in HEAD_DIMS and not causal and logn_length is None
            and sinks is None and hooks <= set(PLAIN_HOOKS)
            and enabled() and _registered())


def attention(q: jax.Array, k: jax.Array, v: jax.Array, scale: float, q_pos=None, k_pos=None,
              window: Optional[int] = None, kv_mask=None, segment_ids=None, q_extra=None,
              k_extra=None) -> jax.Array:
    """softmax(scale q.k) v for float32 q [B, Lq, H, DK], k [B, Lk, H, DK] and v
    [B, Lk, H, D] (the model's layout, read in place; DK = D, or `key_dim_supported`);
    returns [B, Lq, H, D]. With q_extra [B, Lq, H, F] and k_extra [B, Lk, H or 1, F] (1: shared
    by the heads): softmax(scale (q.k + q_extra.k_extra)) v, q and k of v's head dim D, the
    same as q and k concatenated with them but without the concatenated copies (DK = D + F).
    As in `attend`: window, a local layer's by the integer positions q_pos [B, Lq] and k_pos
    [B, Lk] (|q_pos - k_pos| <= window // 2);
    kv_mask [B, Lk] (True: a real key); segment_ids ([B, Lq], [B, Lk]) (equal ids only). A
    query with no key to attend gets 0."""
    batch, len_q, len_k = q.shape[0], q.shape[1], k.shape[1]

    def per_row(x, length, fill=0):  # int32 [B, length]; `fill` where the argument is absent
        if x is None:
            return jnp.full((batch, length), fill, jnp.int32)
        return jnp.broadcast_to(jnp.asarray(x).astype(jnp.int32), (batch, length))

    q_seg, k_seg = (None, None) if segment_ids is None else segment_ids
    ints = (per_row(None if window is None else q_pos, len_q),
            per_row(None if window is None else k_pos, len_k), per_row(kv_mask, len_k, 1),
            per_row(q_seg, len_q), per_row(k_seg, len_k))
    flags = (-1 if window is None else int(window) // 2, kv_mask is not None,
             segment_ids is not None)
    if q_extra is not None:
        return _factored(q, k, v, q_extra, k_extra, ints, float(scale), flags)
    return _attention(q, k, v, ints, float(scale), flags)


# -- the custom call and its gradient -------------------------------------------------------


def _flag_attrs(flags):
    half, has_mask, has_segments = flags
    return dict(half=np.int64(half), has_mask=bool(has_mask), has_segments=bool(has_segments))


def _forward_call(q, k, v, ints, scale, flags):
    shapes = (jax.ShapeDtypeStruct(q.shape[:-1] + v.shape[-1:], jnp.float32),
              jax.ShapeDtypeStruct(q.shape[:-1], jnp.float32))
    call = jax.ffi.ffi_call(TARGET, shapes, vmap_method="sequential")
    block_q, block_k = (WINDOW_BLOCK_Q, WINDOW_BLOCK_K) if flags[0] >= 0 else (BLOCK_Q, BLOCK_K)
    return call(q, k, v, *ints, scale=np.float32(scale), block_q=np.int64(block_q),
                block_k=np.int64(block_k), **_flag_attrs(flags))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _attention(q, k, v, ints, scale, flags):
    return _forward_call(q, k, v, ints, scale, flags)[0]


def _attention_fwd(q, k, v, ints, scale, flags):
    out, lse = _forward_call(q, k, v, ints, scale, flags)
    return out, (q, k, v, ints, out, lse)


def _attention_bwd(scale, flags, residuals, d_out):
    """Flash attention's backward, in the kernel, from the forward's output and log-sum-exp
    (the kernel forms delta = rowsum(d_out * out) per pair: XLA:CPU's reduction was slower)."""
    q, k, v, ints, out, lse = residuals
    shapes = tuple(jax.ShapeDtypeStruct(x.shape, jnp.float32) for x in (q, k, v))
    call = jax.ffi.ffi_call(TARGET + "_backward", shapes, vmap_method="sequential")
    dq, dk, dv = call(q, k, v, d_out.astype(jnp.float32), out, lse, *ints,
                      scale=np.float32(scale), **_flag_attrs(flags))
    return dq, dk, dv, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def _factored_forward(q, k, v, q_extra, k_extra, ints, scale, flags):
    shapes = (jax.ShapeDtypeStruct(q.shape, jnp.float32),
              jax.ShapeDtypeStruct(q.shape[:-1], jnp.float32))
    call = jax.ffi.ffi_call(TARGET + "_factored", shapes, vmap_method="sequential")
    block_q, block_k = (WINDOW_BLOCK_Q, WINDOW_BLOCK_K) if flags[0] >= 0 else (BLOCK_Q, BLOCK_K)
    return call(q, k, v, q_extra, k_extra, *ints, scale=np.float32(scale),
                block_q=np.int64(block_q), block_k=np.int64(block_k), **_flag_attrs(flags))


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7))
def _factored(q, k, v, q_extra, k_extra, ints, scale, flags):
    return _factored_forward(q, k, v, q_extra, k_extra, ints, scale, flags)[0]


def _factored_fwd(q, k, v, q_extra, k_extra, ints, scale, flags):
    """Records whether k_extra is differentiated at all: a term whose key side is a function
    of the positions only (XL's [cos | sin] of p_j) is not, and its backward then skips
    dk_extra (a fifth of the kernel's backward at XL's 8 + 64 key columns)."""
    k_extra_grad = () if k_extra.perturbed else None  # a static flag, as pytree structure
    q, k, v, q_extra, k_extra, ints = jax.tree.map(
        lambda p: p.value, (q, k, v, q_extra, k_extra, ints),
        is_leaf=lambda p: isinstance(p, jax.custom_derivatives.CustomVJPPrimal))
    out, lse = _factored_forward(q, k, v, q_extra, k_extra, ints, scale, flags)
    return out, (q, k, v, q_extra, k_extra, ints, out, lse, k_extra_grad)


def _factored_bwd(scale, flags, residuals, d_out):
    """As _attention_bwd; the kernel gives dk_extra per head, summed here when the heads
    share k_extra (or none: [B, Lk, H, 0] asks the kernel to skip it)."""
    q, k, v, q_extra, k_extra, ints, out, lse, k_extra_grad = residuals
    if isinstance(d_out, jax.custom_derivatives.SymbolicZero):
        d_out = jnp.zeros(d_out.shape, jnp.float32)
    extra_cols = 0 if k_extra_grad is None else k_extra.shape[-1]
    shapes = tuple(jax.ShapeDtypeStruct(x.shape, jnp.float32) for x in (q, k, v, q_extra))
    shapes += (jax.ShapeDtypeStruct(k.shape[:-1] + (extra_cols,), jnp.float32),)
    call = jax.ffi.ffi_call(TARGET + "_factored_backward", shapes, vmap_method="sequential")
    dq, dk, dv, dq_extra, dk_extra = call(q, k, v, q_extra, k_extra, d_out.astype(jnp.float32),
                                          out, lse, *ints, scale=np.float32(scale),
                                          **_flag_attrs(flags))
    if k_extra_grad is None:
        dk_extra = None
    elif k_extra.shape[2] != dk_extra.shape[2]:
        dk_extra = dk_extra.sum(axis=2, keepdims=True)
    return dq, dk, dv, dq_extra, dk_extra, None


_factored.defvjp(_factored_fwd, _factored_bwd, symbolic_zeros=True)


# -- a transpose for the weight gradients' operands ------------------------------------------


def transpose_usable(x) -> bool:
    """Whether `transpose` runs for x here: float32 on CPU with the library built."""
    return (jax.default_backend() == "cpu" and x.dtype == jnp.float32 and enabled()
            and _registered())


@jax.custom_vjp
def transpose(x: jax.Array) -> jax.Array:
    """x.T for float32 x [rows, cols] on CPU, by the library's blocked transpose: XLA:CPU's
    ran a [10240, 64] activation at ~1.4 GB/s, ~8x slower with the layer norm that made it
    fused in (posjax/models/cpu_ops.py takes it for the weight gradients). A custom call: XLA
    fuses nothing into it, so its operand is materialized first, and under a mesh it would run
    whole (callers keep it to one device)."""
    call = jax.ffi.ffi_call(TRANSPOSE, jax.ShapeDtypeStruct(x.shape[::-1], jnp.float32),
                            vmap_method="sequential")
    return call(x)


transpose.defvjp(lambda x: (transpose(x), None), lambda _, ct: (transpose(ct),))


# -- a layer norm for the model's layers -----------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float) -> jax.Array:
    """(x - mean) * rsqrt(var + eps) * scale + bias over the last axis of float32 x [rows, E],
    by the library (usable where `transpose_usable(x)`): one pass per row forward and back,
    where XLA:CPU ran separate fusions for the statistics, the normalization and the
    backward's sums, and materialized the scale's broadcast to [rows, E] for each (posjax/
    models/cpu_ops.py takes it on one CPU device, as `transpose`)."""
    return _layer_norm_fwd(x, scale, bias, eps)[0]


def _layer_norm_fwd(x, scale, bias, eps):
    rows = x.shape[0]
    shapes = (jax.ShapeDtypeStruct(x.shape, jnp.float32),
              jax.ShapeDtypeStruct((rows,), jnp.float32),
              jax.ShapeDtypeStruct((rows,), jnp.float32))
    call = jax.ffi.ffi_call(LAYER_NORM, shapes, vmap_method="sequential")
    y, mean, rstd = call(x, scale, bias, eps=np.float32(eps))
    return y, (x, scale, mean, rstd)


def _layer_norm_bwd(eps, residuals, dy):
    del eps
    x, scale, mean, rstd = residuals
    tasks = -(-x.shape[0] // LAYER_NORM_ROWS)
    shapes = (jax.ShapeDtypeStruct(x.shape, jnp.float32),
              jax.ShapeDtypeStruct((tasks, x.shape[1]), jnp.float32),
              jax.ShapeDtypeStruct((tasks, x.shape[1]), jnp.float32))
    call = jax.ffi.ffi_call(LAYER_NORM + "_backward", shapes, vmap_method="sequential")
    dx, d_scale, d_bias = call(x, scale, mean, rstd, dy.astype(jnp.float32),
                               rows_per_task=np.int64(LAYER_NORM_ROWS))
    return dx, d_scale.sum(0), d_bias.sum(0)


layer_norm.defvjp(_layer_norm_fwd, _layer_norm_bwd)


# -- building and registering the library ---------------------------------------------------


@functools.lru_cache(maxsize=None)
def _registered() -> bool:
    """Build (or find) the library and register its target with XLA, once per process."""
    path = library_path()
    if path is None:
        return False
    try:
        library = ctypes.cdll.LoadLibrary(path)
        for name in (TARGET, TARGET + "_backward", TARGET + "_factored",
                     TARGET + "_factored_backward", TRANSPOSE, LAYER_NORM,
                     LAYER_NORM + "_backward"):
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(library, name)),
                                        platform="cpu")
    except (OSError, AttributeError) as e:
        logging.info("attention: the CPU kernel %s did not load (%s); rows uses its XLA step",
                     path, e)
        return False
    return True


def _flags() -> list[str]:
    # -ffast-math's parts that let the products' loops stay in registers (without them the
    # kernel ran at 0.4x), not -ffast-math itself: linked into a shared library it sets the
    # process's denormals-to-zero flags on load (crtfastmath.o), and assumes no inf.
    flags = ["-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-fopenmp-simd",
             "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros",
             "-freciprocal-math", "-ffp-contract=fast", "-w", "-pthread"]
    if platform.machine().lower() in ("x86_64", "amd64"):
        flags.append("-mprefer-vector-width=512")  # a no-op without AVX-512
    return flags


def _cpu_id() -> str:
    """The CPU's model and features: -march=native builds for this CPU only."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [x for x in f if x.startswith(("model name", "flags", "Features"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor() + platform.machine()


def library_path(environ=os.environ) -> Optional[str]:
    """The built library for this source, compiler and CPU (building it if needed), or None
    (no compiler, a failed build, or the kernel turned off)."""
    if not enabled(environ):
        return None
    compiler = environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        logging.info("attention: no C++ compiler found for the CPU kernel; rows uses its XLA "
                     "step")
        return None
    include = jax.ffi.include_dir()
    with open(SOURCE, "rb") as f:
        source = f.read()
    key = hashlib.sha256(b"\0".join([
        source, " ".join(_flags()).encode(), compiler.encode(), include.encode(),
        _cpu_id().encode()])).hexdigest()[:20]
    directory = user_cache.directory(environ, "cpu_kernels")
    path = os.path.join(directory, f"cpu_attention-{key}.so")
    if os.path.exists(path):
        return path
    try:
        os.makedirs(directory, exist_ok=True)
        with filelock.FileLock(path + ".lock"):
            if not os.path.exists(path):
                _build(compiler, include, directory, path)
    except (OSError, subprocess.SubprocessError, filelock.Timeout) as e:
        logging.info("attention: the CPU kernel was not built (%s); rows uses its XLA step",
                     str(e).splitlines()[0] if str(e) else type(e).__name__)
        return None
    return path


def _build(compiler: str, include: str, directory: str, path: str) -> None:
    # Into a temporary file, then renamed: a killed build never leaves a partial library.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=directory)
    os.close(fd)
    try:
        subprocess.run([compiler, *_flags(), f"-I{include}", SOURCE, "-o", tmp], check=True,
                       capture_output=True, timeout=300)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
