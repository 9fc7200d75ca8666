"""Public entry: `flash_attention` (same keywords as posjax.attention.attend) and `supports`.

This file turns (scheme, params) into the kernel's static `Fused` description plus small
arrays, pads and transposes the inputs (lengths to whole blocks, head dims to Triton tile
widths), and picks blocks and the backend. All of it is plain JAX outside the custom_vjp, so
the gradients of these preparations (KERPLE's straight-through clamp, the T5 / DeBERTa table
transposes, the zero padding of q/k/v and of the tables) come from JAX itself.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from posjax.errors import ConfigError
from posjax.kernels.core import flash_core
from posjax.kernels.fused import Fused
from posjax.kernels.layout import LAYOUTS, Static, to_layout
from posjax.positions.base import Scheme
from posjax.positions.deberta import Deberta
from posjax.positions.bias import Alibi, Kerple, _clamp, alibi_slopes
from posjax.positions.relative import Nezha, Shaw, nezha_table
from posjax.positions.rotary import Rope, XPos, rope_inv_freq
from posjax.positions.t5 import T5

# Exact classes the kernel fuses (subclasses may change the math, so they are not assumed).
FUSED_SCHEMES = (Rope, XPos, Alibi, Kerple, T5, Shaw, Nezha, Deberta)

# Default tiles per backend (powers of two; Triton needs >= 16). GPU: 64 x 64 keeps the
# [bq, D] accumulators of head dim 128 in registers with 8 warps (jax's Pallas GPU attention
# uses 128 x 128 forward, 32 x 32 backward). TPU: 128 x 128 (the MXU tile; jax's TPU flash
# attention default), and never smaller (see MIN_BLOCK_TPU). CPU: interpret mode (any size).
DEFAULT_BLOCKS = {"gpu": (64, 64), "tpu": (128, 128), "cpu": (64, 64)}
MIN_BLOCK = 16
# Compiled Triton kernels take tiles of at most 64 x 64 (larger requests, e.g. attend()'s
# default 128 meant for the chunked path, are rounded down to it). Measured by compiling for
# an H200 without one (bench/gpu_compile.py, bench/gpu_compile_h200.md): at 128 x 128 every
# kernel spills registers (0.75-34 KB per thread), head dim 64 fails inside Triton (a 1-bit
# mask staged through shared memory) and Shaw / NEZHA in float32 at head dim 128 need 256 KiB
# of shared memory (227 KiB available).
MAX_BLOCK_GPU = 64
# The 'tpu' layout puts key blocks on the 128 lanes ([S, bk] per-key blocks), so its blocks are
# multiples of 128 (powers of two >= 128).
MIN_BLOCK_TPU = 128


def supports(scheme: Optional[Scheme]) -> bool:
    """True iff flash_attention computes this scheme's attention hooks exactly.

    Fused: no attention hook at all (NoPE and the absolute schemes, whose only hook is
    `embed`), Rope with every pairing / partial rotation / scaling (none, linear, ntk,
    dynamic_ntk, yarn), xPos, ALiBi (symmetric or one-sided), KERPLE (log, power), T5 (both
    directions), Shaw, NEZHA and DeBERTa (c2p and/or p2c, any buckets). Everything else
    (ReRoPE, Sandwich, FIRE, XL, TUPE, subclasses of the above) is not, and attention falls
    back to 'chunked'.

    Backends: GPU (Triton), TPU (Mosaic, the 'tpu' block layout of layout.py) and CPU
    (interpret mode): the same set on each. On TPU "supported" means: the forward and both
    backward kernels of every scheme above compile with libtpu for TPU v4 / v5e / v5p / v6e /
    TPU7x (deviceless, on a CPU machine: tests/kernels/test_lowering_tpu.py,
    bench/tpu_compile.py) and the 'tpu' layout matches the reference in interpret mode
    (tests/kernels/test_layout.py); they have not run on TPU hardware here. RoPE / xPos on
    TPU rotate q and k in XLA before the kernel (see flash_attention), so they are exact
    there too.
    """
    return fuses(scheme)


def fuses(scheme: Optional[Scheme]) -> bool:
    """True iff the kernel computes this scheme's attention hooks (any backend)."""
    if scheme is None:
        return True
    if not isinstance(scheme, Scheme):
        return False
    hooks = set(scheme.hooks) - {"embed"}
    if not hooks:
        return type(scheme).logit_scale is Scheme.logit_scale
    return type(scheme) in FUSED_SCHEMES


def default_interpret() -> bool:
    """interpret=None: interpret mode on CPU (no Pallas compiler there), compiled elsewhere."""
    return jax.default_backend() == "cpu"


def _backend() -> str:
    name = jax.default_backend()
    return {"cuda": "gpu", "rocm": "gpu"}.get(name, name)


def pick_block(requested: Optional[int], length: int, default: int,
               minimum: int = MIN_BLOCK) -> int:
    """A power of two >= `minimum`, <= the requested size (rounded down), no larger than
    needed to cover `length` (short sequences get small tiles)."""
    size = default if requested is None else int(requested)
    size = max(minimum, 1 << (max(size, 1).bit_length() - 1))
    return min(size, max(minimum, 1 << max(length - 1, 1).bit_length()))


def _fused(scheme: Scheme, params, q, k_pos) -> tuple[Fused, dict]:
    """Static description and the small arrays of a supported scheme."""
    dim, heads = q.shape[-1], q.shape[2]
    scale = float(scheme.logit_scale(dim))
    if isinstance(scheme, Rope):
        scheme.check(_dims(heads, dim), 1)
        rot = scheme.rotary_size(dim)
        inv_freq = jnp.asarray(scheme.inv_freq(dim, k_pos), jnp.float32)
        inv_freq = jnp.broadcast_to(inv_freq, (q.shape[0], rot // 2))
        return Fused("rope", scale, half=rot // 2), {"inv_freq": inv_freq}
    if isinstance(scheme, XPos):
        # RoPE on all dims with the per-pair scale zeta**(+-pos/scale_base) (xpos_scale):
        # the kernel multiplies cos/sin by exp(+-pos * log(zeta)/scale_base).
        zeta = (np.arange(0, dim, 2) + scheme.gamma * dim) / ((1 + scheme.gamma) * dim)
        log_zeta = jnp.asarray(np.log(zeta) / scheme.scale_base, jnp.float32)
        rows = (q.shape[0], dim // 2)
        return Fused("rope", scale, half=dim // 2), {
            "inv_freq": jnp.broadcast_to(rope_inv_freq(dim, scheme.base), rows),
            "xpos": jnp.broadcast_to(log_zeta, rows)}
    if isinstance(scheme, Alibi):
        slopes = jnp.asarray(alibi_slopes(heads), jnp.float32)[:, None]
        symmetric = True if scheme.symmetric is None else bool(scheme.symmetric)
        return Fused("alibi", scale, symmetric=symmetric), {"hp": slopes}
    if isinstance(scheme, Kerple):
        # The reference's straight-through clamp, applied outside the kernel: the kernel sees
        # the clamped values, JAX passes their gradient to the raw parameters unchanged.
        r1 = _clamp(params["r1"], scheme.eps)
        r2 = _clamp(params["r2"], scheme.eps, 2.0 if scheme.variant == "power" else None)
        hp = jnp.stack([r1, r2], axis=-1).astype(jnp.float32)
        return Fused("kerple", scale, variant=scheme.variant), {"hp": hp}
    if isinstance(scheme, T5):
        table = params["table"].astype(jnp.float32).T  # [H, num_buckets]
        width = _pow2(table.shape[-1])
        table = jnp.pad(table, ((0, 0), (0, width - table.shape[-1])))
        fused = Fused("t5", scale, bidirectional=bool(scheme.bidirectional),
                      num_buckets=scheme.num_buckets, max_distance=scheme.max_distance)
        return fused, {"hp": table}
    if isinstance(scheme, Deberta):
        # Per-head projected tables [2*span, H, D] -> [H, Rp, D] (rows padded to a power of
        # two for Triton); buckets are computed in-kernel with deberta_bucket.
        span = scheme.span
        rows = 2 * span
        fused = Fused("deberta", scale, num_buckets=scheme.bucket_size,
                      max_distance=scheme.max_position, max_rel=span, c2p=bool(scheme.c2p),
                      p2c=bool(scheme.p2c))

        def per_head(name):
            if name not in params:
                return None
            table = jnp.transpose(params[name].astype(jnp.float32), (1, 0, 2))
            return jnp.pad(table, ((0, 0), (0, _pow2(rows) - rows), (0, 0)))

        tables = {"tabk": per_head("pos_key") if scheme.c2p else None,
                  "tabv": per_head("pos_query") if scheme.p2c else None}
        return fused, {n: t for n, t in tables.items() if t is not None}
    if isinstance(scheme, (Shaw, Nezha)):
        kmax = scheme.max_relative_position
        rows = 2 * kmax + 1
        pad = ((0, _pow2(rows) - rows), (0, 0))  # Triton wants power-of-two shapes
        if isinstance(scheme, Shaw):
            tabk = jnp.pad(params["keys"].astype(jnp.float32), pad)
            tabv = jnp.pad(params["values"].astype(jnp.float32), pad)
            fused = Fused("table", scale, max_rel=kmax, learn_tables=True)
            return fused, {"tabk": tabk, "tabv": tabv}
        tab = jnp.pad(nezha_table(kmax, dim), pad)
        return Fused("table", scale, max_rel=kmax, shared_table=True), {"tabk": tab}
    return Fused("none", scale), {}


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _width(n: int) -> int:
    """Tile width the Triton lowering accepts: a power of two >= MIN_BLOCK."""
    return max(MIN_BLOCK, _pow2(n))


def _pad_last(x, segments):
    """Concatenate x[..., a:a+n] zero-padded to m columns for each (a, n, m)."""
    parts = []
    for a, n, m in segments:
        part = x[..., a:a + n]
        if m > n:
            part = jnp.pad(part, [(0, 0)] * (x.ndim - 1) + [(0, m - n)])
        parts.append(part)
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)


def _pad_widths(fused: Fused, small: dict, q, k, v):
    """Zero-pad head dims to tile widths Triton accepts (powers of two >= 16), exactly.

    Zero columns change no q.k, add zero output columns (sliced off), and padded table
    columns / zero inverse frequencies (angle 0: cos 1, sin 0 on zero columns) change
    nothing; the logit scale was already taken from the true head dim. RoPE pads each rotated
    half and the pass-through part separately so the halves stay aligned. Gradients of the
    padding (slices) come from JAX.
    """
    dim = q.shape[-1]
    if fused.kind == "rope":
        h, hp = fused.half, _width(fused.half)
        segments = [(0, h, hp), (h, h, hp)]
        if dim > 2 * h:
            segments.append((2 * h, dim - 2 * h, _width(dim - 2 * h)))
        small = {n: _pad_last(x, [(0, h, hp)]) for n, x in small.items()}
        fused = dataclasses.replace(fused, half=hp)
    else:
        segments = [(0, dim, _width(dim))]
        small = {n: (_pad_last(x, segments) if n in ("tabk", "tabv") else x)
                 for n, x in small.items()}
    if all(n == m for _, n, m in segments) and _width(dim) == dim:
        return fused, small, q, k, v
    v_segments = [(0, dim, _width(dim))]
    return fused, small, _pad_last(q, segments), _pad_last(k, segments), _pad_last(v, v_segments)


def _dims(heads, dim):
    from posjax.positions.base import Dims

    return Dims(num_heads=heads, head_dim=dim, hidden=heads * dim, max_length=1)


def _interleaved_perm(rot: int, dim: int) -> np.ndarray:
    """Columns that put the interleaved pairs (2i, 2i+1) of the first `rot` dims into the
    half-split layout (i, i + rot/2); applied to q AND k it leaves every q.k unchanged."""
    return np.concatenate([np.arange(0, rot, 2), np.arange(1, rot, 2), np.arange(rot, dim)])


def _pad_rows(x, length: int, value=0):
    pad = length - x.shape[1]
    if not pad:
        return x
    widths = [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)
    return jnp.pad(x, widths, constant_values=value)


def _logn_factor(q_pos, k_pos, kvalid, q_seg, k_seg, causal, logn_length, block):
    """log(n_keys)/log(logn_length) [B, Lq], n_keys counted one key block at a time (integer
    work, O(Lq x block) memory)."""
    batch, len_q = q_pos.shape
    len_k = k_pos.shape[1]
    nk = len_k // block

    def count(n, j):
        sl = lambda x: jax.lax.dynamic_slice_in_dim(x, j * block, block, axis=1)  # noqa: E731
        ok = jnp.ones((batch, len_q, block), jnp.bool_)
        if kvalid is not None:
            ok = ok & (sl(kvalid) != 0)[:, None, :]
        if q_seg is not None:
            ok = ok & (q_seg[:, :, None] == sl(k_seg)[:, None, :])
        if causal:
            ok = ok & (sl(k_pos)[:, None, :] <= q_pos[:, :, None])
        return n + ok.sum(-1, dtype=jnp.int32), None

    n, _ = jax.lax.scan(count, jnp.zeros((batch, len_q), jnp.int32), jnp.arange(nk))
    n = jnp.maximum(n, 1).astype(jnp.float32)
    return jnp.log(n) / jnp.float32(math.log(logn_length))


def flash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    scheme: Optional[Scheme] = None,
    params: Any = None,
    q_pos: Optional[jax.Array] = None,
    k_pos: Optional[jax.Array] = None,
    kv_mask: Optional[jax.Array] = None,
    segment_ids: Optional[tuple[jax.Array, jax.Array]] = None,
    causal: bool = False,
    logn_length: Optional[float] = None,
    block_q: Optional[int] = None,
    block_k: Optional[int] = None,
    interpret: Optional[bool] = None,
    layout: Optional[str] = None,
    skip_empty_tiles: bool = True,
    shard_axes: Optional[tuple[Any, Any]] = None,
) -> jax.Array:
    """Flash attention with the scheme's position hooks computed on chip; [B, Lq, H, D] out.

    Same contract and numbers as posjax.attention.attend (see its docstring for the order of
    operations); memory O(L) forward and backward. Differentiable w.r.t. q, k, v and the
    scheme's learnable params (KERPLE r1/r2, T5 table, Shaw tables, DeBERTa Kr/Qr). Blocks
    are rounded down to powers of two >= 16 (>= 128 in the 'tpu' layout; <= MAX_BLOCK_GPU
    compiled on GPU; None: a per-backend default); any head dim works (zero-padded to a
    power of two >= 16 inside). interpret=None runs the kernels in Pallas interpret mode on
    CPU and compiled elsewhere (Triton on GPU, Mosaic on TPU). layout=None picks the block layout by backend ('tpu' on TPU, else
    'flat'; layout.py); layout='tpu' with interpret=True runs the TPU layout on CPU (tests).
    skip_empty_tiles=False computes every tile instead of skipping (lax.cond) those where no
    pair may attend: same numbers. The skip saves about half the tiles of a causal pass, but
    on GPU the cond roughly doubles the kernels' registers (none/bf16/D=64: 240-255 -> 140-236
    without it, bench/gpu_compile_h200.md) and stops Triton's software pipelining; which is
    faster is for bench/kernels.py on a GPU to tell (it times both).

    shard_axes=(batch mesh axes, head mesh axes) of q/k/v under the current (abstract) mesh:
    the kernels then run once per shard inside shard_map, since a Pallas kernel cannot be
    partitioned by XLA (TPU refuses to compile it on more than one device: "Mosaic kernels
    cannot be automatically partitioned"). Per-head arrays (ALiBi slopes, KERPLE, T5 and
    DeBERTa tables) are built for all heads first and split with the heads, so every shard
    sees its own heads' values; sequences are never split.
    """
    if not fuses(scheme):
        raise ConfigError("scheme", getattr(scheme, "name", scheme),
                          "a scheme posjax.kernels.supports() (use implementation='chunked')")
    scheme = Scheme() if scheme is None else scheme
    params = {} if params is None else params
    if q.ndim != 4 or k.shape != v.shape or k.shape[0] != q.shape[0] or k.shape[2:] != q.shape[2:]:
        raise ConfigError("q/k/v.shape", (q.shape, k.shape, v.shape),
                          "q [B, Lq, H, D], k and v [B, Lk, H, D]")
    batch, len_q, heads, dim = q.shape
    len_k = k.shape[1]
    if q_pos is None:
        q_pos = jnp.broadcast_to(jnp.arange(len_q, dtype=jnp.int32), (batch, len_q))
    if k_pos is None:
        k_pos = jnp.broadcast_to(jnp.arange(len_k, dtype=jnp.int32), (batch, len_k))
    q_pos, k_pos = q_pos.astype(jnp.int32), k_pos.astype(jnp.int32)

    backend = _backend()
    interpret = default_interpret() if interpret is None else bool(interpret)
    layout = ("tpu" if backend == "tpu" else "flat") if layout is None else layout
    if layout not in LAYOUTS:
        raise ConfigError("layout", layout, f"one of {LAYOUTS} or None (by backend)")
    if not interpret and backend not in ("gpu", "tpu"):
        raise ConfigError("interpret", interpret,
                          f"True on backend '{backend}' (the kernels compile for GPU/Triton "
                          "and TPU/Mosaic only)")
    if not interpret and layout != ("tpu" if backend == "tpu" else "flat"):
        raise ConfigError("layout", layout, f"'{'tpu' if backend == 'tpu' else 'flat'}' for "
                          f"compiled kernels on backend '{backend}' (any layout interprets)")
    dq_default, dk_default = DEFAULT_BLOCKS.get(backend, DEFAULT_BLOCKS["cpu"])
    minimum = MIN_BLOCK_TPU if layout == "tpu" else MIN_BLOCK
    bq = pick_block(block_q, len_q, dq_default, minimum)
    bk = pick_block(block_k, len_k, dk_default, minimum)
    if backend == "gpu" and not interpret:
        bq, bk = min(bq, MAX_BLOCK_GPU), min(bk, MAX_BLOCK_GPU)
    lq_pad, lk_pad = -(-len_q // bq) * bq, -(-len_k // bk) * bk

    fused, small = _fused(scheme, params, q, k_pos)
    if fused.kind == "rope" and layout == "tpu":
        # Mosaic: the kernel's rotation works on the two halves of the rotated dims, i.e.
        # lane slices at offset R/2 (not 128-aligned for common head dims). On TPU the
        # rotation runs instead as one elementwise XLA pass over q and k (the scheme's own
        # rotate hook: exactly what the reference does, O(L x D) like reading q), and the
        # kernel sees plain q.k. Gradients of the rotation come from JAX.
        q, k = scheme.rotate(params, q, k, q_pos, k_pos)
        fused, small = Fused("none", fused.scale), {}
    if fused.kind == "rope" and scheme.interleaved:  # Rope and XPos both have the field
        perm = _interleaved_perm(2 * fused.half, dim)
        q, k = q[..., perm], k[..., perm]  # gradient: JAX transposes the gather
    fused, small, q, k, v = _pad_widths(fused, small, q, k, v)
    if layout == "tpu":
        small = _tpu_tables(fused, small)

    aux = {"qpos": _pad_rows(q_pos, lq_pad), "kpos": _pad_rows(k_pos, lk_pad)}
    if fused.kind == "rope":  # key positions down the sublanes, to rotate key tiles
        aux["kposc"] = aux["kpos"]
    kvalid = None
    if kv_mask is not None or lk_pad > len_k:
        real = jnp.ones((batch, len_k), jnp.int32) if kv_mask is None else kv_mask.astype(jnp.int32)
        kvalid = _pad_rows(real, lk_pad)
        aux["kvalid"] = kvalid
    q_seg = k_seg = None
    if segment_ids is not None:
        q_seg = _pad_rows(segment_ids[0].astype(jnp.int32), lq_pad)
        k_seg = _pad_rows(segment_ids[1].astype(jnp.int32), lk_pad)
        aux["qseg"], aux["kseg"] = q_seg, k_seg
    if logn_length is not None:
        aux["factor"] = _logn_factor(aux["qpos"], aux["kpos"], kvalid, q_seg, k_seg,
                                     bool(causal), logn_length, bk)
    for name in ("inv_freq", "xpos"):
        if name in small:
            aux[name] = jax.lax.stop_gradient(small[name])

    def to_kernel(x, length):  # [B, L, H, D] -> [B, H, L_pad, D]
        return jnp.swapaxes(_pad_rows(x, length), 1, 2)

    st = Static(fused=fused, block_q=bq, block_k=bk, causal=bool(causal), interpret=interpret,
                backend=backend, layout=layout, skip_empty_tiles=bool(skip_empty_tiles))
    run = functools.partial(flash_core, st)
    if shard_axes is not None:
        run = _per_shard(run, shard_axes, per_head_tables=fused.kind == "deberta")
    out = run(to_kernel(q, lq_pad), to_kernel(k, lk_pad), to_kernel(v, lk_pad),
               small.get("hp"), small.get("tabk"), small.get("tabv"), to_layout(st, aux))
    return jnp.swapaxes(out, 1, 2)[:, :len_q, :, :dim].astype(q.dtype)


def _per_shard(core, shard_axes, per_head_tables: bool):
    """core(q, k, v, hp, tabk, tabv, aux) run per (batch, head) shard of the current mesh."""
    from jax.sharding import PartitionSpec as P

    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        raise ConfigError("shard_axes", shard_axes,
                          "None outside a mesh (set one with jax.sharding.use_mesh)")
    if not (isinstance(shard_axes, tuple) and len(shard_axes) == 2):
        raise ConfigError("shard_axes", shard_axes, "a pair (batch mesh axes, head mesh axes)")
    batch, heads = shard_axes
    blhd = P(batch, heads)  # q, k, v and out in the kernel layout [B, H, L, D]
    tables = P(heads) if per_head_tables else P()  # DeBERTa [H, ...]; Shaw/NEZHA shared
    in_specs = (blhd, blhd, blhd, P(heads), tables, tables, P(batch))  # aux: [B, ...] rows
    return jax.shard_map(core, mesh=mesh, in_specs=in_specs, out_specs=blhd, check_vma=False)


def _tpu_tables(fused: Fused, small: dict) -> dict:
    """Tables for the 'tpu' layout: rows padded to a multiple of 8 and folded into (8, D)
    tiles, [Rp/8, 8, D] (DeBERTa [H, Rp/8, 8, D]); the kernel reads row r from tile r // 8
    (fused._row). Padding rows are zero and never indexed; gradients: JAX un-pads."""
    out = dict(small)
    for name in ("tabk", "tabv"):
        if name in small:
            x = small[name]
            rows = x.shape[-2]
            pad = -rows % 8
            if pad:
                x = jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, pad), (0, 0)])
            out[name] = x.reshape(x.shape[:-2] + ((rows + pad) // 8, 8, x.shape[-1]))
    return out
