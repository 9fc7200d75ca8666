"""Public entry `flash_attention` (same keywords as posjax.attention.attend): the backend,
blocks, padding and `shard_map` around the custom_vjp (vjp.py).

It builds the scheme's fused term and its arrays (schemes.describe: a registry lookup,
terms/), pads and transposes the inputs (lengths to whole blocks, head dims to Triton tile
widths), lays the term's arrays out by their placements (terms/base.py) and picks blocks and
the backend. All of it is plain JAX outside the custom_vjp, so the gradients of these steps
come from JAX itself.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from posjax.tiling.tiles import count_keys, logn_factor, rotate_values, tile_mask
from posjax.errors import ConfigError
from posjax.kernels import band as bandlib
from posjax.kernels.layout import LAYOUTS, Static, to_layout
from posjax.kernels.schemes import describe, refusal, supports
from posjax.kernels.terms.base import (BATCH_ROW, HEAD_SCALARS, HEAD_TABLE, KEY_TOKENS,
                                       QUERY_TOKENS, TABLE, TABLES, Call, pad_last, pow2)
from posjax.kernels.vjp import flash_vjp
from posjax.positions.base import Scheme

# Default tiles per backend (powers of two; Triton needs >= 16). GPU: 64 x 64 keeps the
# [bq, D] accumulators of head dim 128 in registers with 8 warps (jax's Pallas GPU attention
# uses 128 x 128 forward, 32 x 32 backward). TPU: 128 x 128 (the MXU tile; jax's TPU flash
# attention default), and never smaller (see MIN_BLOCK_TPU). CPU: interpret mode (any size).
DEFAULT_BLOCKS = {"gpu": (64, 64), "tpu": (128, 128), "cpu": (64, 64)}
MIN_BLOCK = 16
# Compiled Triton kernels take tiles of at most 64 x 64 (larger requests, e.g. attend()'s
# default 128 meant for the chunked path, are rounded down to it): at 128 x 128 the kernels
# spill registers, head dim 64 fails inside Triton and Shaw / NEZHA in float32 at head dim
# 128 exceed the shared memory (bench/gpu_compile.py; numbers in bench/gpu_compile_h200.md).
MAX_BLOCK_GPU = 64
# The 'tpu' layout puts key blocks on the 128 lanes ([S, bk] per-key blocks), so its blocks are
# multiples of 128 (powers of two >= 128).
MIN_BLOCK_TPU = 128


def default_interpret() -> bool:
    """interpret=None: interpret mode on CPU (no Pallas compiler there), compiled elsewhere.

    Follows `target_backend`, not jax's backend, so that a compile for a described GPU or TPU
    from a CPU process (the bench compile scripts) builds the real kernels through the model
    too, not their interpret-mode emulation."""
    return target_backend() == "cpu"


def target_backend() -> str:
    """'gpu', 'tpu' or 'cpu': what the kernels are built for. The lowering tests and the bench
    compile scripts replace it to target a device this machine does not have."""
    name = jax.default_backend()
    return {"cuda": "gpu", "rocm": "gpu"}.get(name, name)


def pick_block(requested: Optional[int], length: int, default: int,
               minimum: int = MIN_BLOCK) -> int:
    """A power of two >= `minimum`, <= the requested size (rounded down), no larger than
    needed to cover `length` (short sequences get small tiles)."""
    size = default if requested is None else int(requested)
    size = max(minimum, 1 << (max(size, 1).bit_length() - 1))
    return min(size, max(minimum, 1 << max(length - 1, 1).bit_length()))


def _width(n: int) -> int:
    """Tile width the Triton lowering accepts: a power of two >= MIN_BLOCK."""
    return max(MIN_BLOCK, pow2(n))


def _pad_widths(terms: tuple, arrays: dict, q, k, v):
    """Zero-pad head dims to tile widths Triton accepts (powers of two >= 16), exactly.

    Zero columns change no q.k, add zero output columns (sliced off), and the terms pad their
    own arrays to match (tables' columns; RoPE pads each rotated half and the pass-through
    part separately so the halves stay aligned, with zero inverse frequencies: angle 0 on
    zero columns); the logit scale was already taken from the true head dim. Gradients of
    the padding (slices) come from JAX.
    """
    dim = q.shape[-1]
    segments, widened = [(0, dim, _width(dim))], []
    for term in terms:
        term, arrays, own = term.widen(arrays, dim, _width)
        widened.append(term)
        segments = own if own is not None else segments
    terms = tuple(widened)
    if all(n == m for _, n, m in segments) and _width(dim) == dim:
        return terms, arrays, q, k, v
    v_segments = [(0, dim, _width(dim))]
    return terms, arrays, pad_last(q, segments), pad_last(k, segments), pad_last(v, v_segments)


def _pad_rows(x, length: int, value=0):
    pad = length - x.shape[1]
    if not pad:
        return x
    widths = [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)
    return jnp.pad(x, widths, constant_values=value)


def _logn_factor(q_pos, k_pos, kvalid, q_seg, k_seg, causal, logn_length, block, window=None):
    """The log-n factor [B, Lq] of posjax.tiling.tiles, keys counted one key block at a
    time with the tiles' mask (integer work, O(Lq x block) memory)."""
    batch, len_q = q_pos.shape

    def count(n, j):
        sl = lambda x: None if x is None else jax.lax.dynamic_slice_in_dim(  # noqa: E731
            x, j * block, block, axis=1)
        valid = None if kvalid is None else sl(kvalid) != 0
        mask = tile_mask(q_pos, sl(k_pos), valid, q_seg, sl(k_seg), causal, window)
        return n + count_keys(mask, (batch, 1, len_q, block))[:, 0], None

    n, _ = jax.lax.scan(count, jnp.zeros((batch, len_q), jnp.int32),
                        jnp.arange(k_pos.shape[1] // block))
    return logn_factor(n, logn_length)


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
    window: Optional[int] = None,
    sinks: Optional[jax.Array] = None,
) -> jax.Array:
    """Flash attention with the scheme's position hooks computed on chip; [B, Lq, H, D] out.

    Same contract and numbers as posjax.attention.attend (see its docstring for the order of
    operations); memory O(L) forward and backward. Differentiable w.r.t. q, k, v and the
    scheme's learnable params (KERPLE r1/r2, T5 table, Shaw tables, DeBERTa Kr/Qr, FoX's gate
    w and b through its per-token sums). Blocks
    are rounded down to powers of two >= 16 (>= 128 in the 'tpu' layout; <= MAX_BLOCK_GPU
    compiled on GPU; None: a per-backend default); any head dim works (zero-padded to a
    power of two >= 16 inside). interpret=None runs the kernels in Pallas interpret mode on
    CPU and compiled elsewhere (Triton on GPU, Mosaic on TPU). layout=None picks the block
    layout by backend ('tpu' on TPU, else 'flat'; layout.py); layout='tpu' with
    interpret=True runs the TPU layout on CPU (tests). The scheme must be bound
    (scheme.bind(dims)).
    skip_empty_tiles=False computes every tile instead of skipping (lax.cond) those where no
    pair may attend: same numbers. The skip saves about half the tiles of a causal pass, but
    on GPU the cond raises the kernels' register use and stops Triton's software pipelining;
    which is faster is for bench/kernels.py on a GPU to tell (it times both).

    shard_axes=(batch mesh axes, head mesh axes) of q/k/v under the current (abstract) mesh:
    the kernels then run once per shard inside shard_map, since a Pallas kernel cannot be
    partitioned by XLA (TPU refuses to compile it on more than one device: "Mosaic kernels
    cannot be automatically partitioned"). Per-head arrays (ALiBi slopes, KERPLE, T5 and
    DeBERTa tables) are built for all heads first and split with the heads, so every shard
    sees its own heads' values; sequences are never split.

    window: a local layer (posjax.tiling.tiles.window_mask), masked in the kernels by
    position; each program walks only the blocks of the window's band when the positions
    allow it (band.py: checked on the data as in the chunked path; always when q_pos and
    k_pos are None), and every tile it leaves empty is skipped (skip_empty_tiles). sinks: [H] learned
    sink logits, applied to the kernel's output from its logsumexp: with the sink in the
    denominator, out_i * Z_i / (Z_i + exp(sink)) = out_i * sigmoid(lse_i - sink).
    """
    if refusal(scheme):
        raise ConfigError("scheme", scheme.name, "a scheme the kernel can run; "
                          f"{refusal(scheme)}: use implementation='chunked'")
    if not supports(scheme):
        raise ConfigError("scheme", getattr(scheme, "name", scheme),
                          "a scheme posjax.kernels.supports() (use implementation='chunked')")
    if scheme is not None and scheme.attention_hooks and scheme.dims is None:
        raise ConfigError("scheme", scheme.name, "a scheme bound to the model dims "
                          "(scheme.bind(dims); models do it once)")
    scheme = Scheme() if scheme is None else scheme
    params = {} if params is None else params
    if q.ndim != 4 or k.shape != v.shape or k.shape[0] != q.shape[0] or k.shape[2:] != q.shape[2:]:
        raise ConfigError("q/k/v.shape", (q.shape, k.shape, v.shape),
                          "q [B, Lq, H, D], k and v [B, Lk, H, D]")
    batch, len_q, heads, dim = q.shape
    len_k = k.shape[1]
    indices = q_pos is None and k_pos is None  # positions are the array indices (band.py)
    if q_pos is None:
        q_pos = jnp.broadcast_to(jnp.arange(len_q, dtype=jnp.int32), (batch, len_q))
    if k_pos is None:
        k_pos = jnp.broadcast_to(jnp.arange(len_k, dtype=jnp.int32), (batch, len_k))
    q_pos, k_pos = q_pos.astype(jnp.int32), k_pos.astype(jnp.int32)
    # RoPE on values: elementwise in position, so it runs in XLA around the kernel (v by the
    # key positions here, the output back by the query positions at the end).
    v = rotate_values(scheme, params, v, k_pos, k_pos)

    backend = target_backend()
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

    scale = float(scheme.logit_scale(dim))
    built = describe(scheme, Call(params, q, k, v, q_pos, k_pos, lq_pad, lk_pad, layout))
    terms = () if built.term is None else (built.term,)
    terms, arrays, q, k, v = _pad_widths(terms, built.arrays, built.q, built.k, v)
    places = {n: p for term in terms for n, p in term.inputs().items()}
    if layout == "tpu":
        arrays = {n: _tpu_table(x) if places[n] in TABLES else x for n, x in arrays.items()}

    aux = {"qpos": _pad_rows(q_pos, lq_pad), "kpos": _pad_rows(k_pos, lk_pad)}
    if any(term.key_columns for term in terms):  # key positions down the sublanes
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
                                     bool(causal), logn_length, bk,
                                     None if window is None else int(window))
    for name in [n for n in arrays if places[n] == BATCH_ROW]:  # never differentiated
        aux[name] = jax.lax.stop_gradient(arrays.pop(name))

    def to_kernel(x, length):  # [B, L, H, D] -> [B, H, L_pad, D]
        return jnp.swapaxes(_pad_rows(x, length), 1, 2)

    band = "off"
    if window is not None and bandlib.useful(int(window), bool(causal), bq, bk, lq_pad // bq,
                                             lk_pad // bk):
        # A local layer walks only its band of blocks: always when positions are the array
        # indices, else when the data allow it (checked like the chunked path; band.py).
        band = "on" if indices else "checked"
        if band == "checked":
            ok = bandlib.exact(q_pos, k_pos, kv_mask, segment_ids, bool(causal), int(window),
                               bq, bk)
            aux["band_ok"] = jnp.broadcast_to(ok, (batch,)).astype(jnp.int32)
    st = Static(terms=terms, scale=scale, block_q=bq, block_k=bk, causal=bool(causal),
                interpret=interpret, backend=backend, layout=layout, skip_empty_tiles=bool(skip_empty_tiles),
                window=None if window is None else int(window), band=band,
                blocks=() if band == "off" else (lq_pad // bq, lk_pad // bk))
    run = functools.partial(flash_vjp, st)
    if shard_axes is not None:
        run = _per_shard(run, shard_axes, {n: places[n] for n in arrays})
    out, lse = run(to_kernel(q, lq_pad), to_kernel(k, lk_pad), to_kernel(v, lk_pad), arrays,
                   to_layout(st, aux))
    out = jnp.swapaxes(out, 1, 2)[:, :len_q, :, :dim].astype(jnp.float32)
    if sinks is not None:  # a query with no key: out 0 stays 0
        keep = jax.nn.sigmoid(lse - sinks.astype(jnp.float32)[None, :, None])  # [B, H, Lq]
        out = out * jnp.swapaxes(keep, 1, 2)[:, :len_q, :, None]
    return rotate_values(scheme, params, out, q_pos, k_pos, inverse=True).astype(q.dtype)


def _per_shard(run, shard_axes, places: dict):
    """run(q, k, v, arrays, aux) per (batch, head) shard of the current mesh; `places`: the
    placement of each term array (terms/base.py), which says how it splits."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        raise ConfigError("shard_axes", shard_axes,
                          "None outside a mesh (set one with jax.sharding.use_mesh)")
    if not (isinstance(shard_axes, tuple) and len(shard_axes) == 2):
        raise ConfigError("shard_axes", shard_axes, "a pair (batch mesh axes, head mesh axes)")
    batch, heads = shard_axes
    blhd = P(batch, heads)  # q, k, v and out in the kernel layout [B, H, L, D]
    split = {HEAD_SCALARS: P(heads), HEAD_TABLE: P(heads), TABLE: P(),  # shared: whole
             QUERY_TOKENS: blhd, KEY_TOKENS: blhd}  # per-token sums [B, H, L], like q
    arrays = {name: split[place] for name, place in places.items()}
    in_specs = (blhd, blhd, blhd, arrays, P(batch))  # aux: [B, ...] rows
    return jax.shard_map(run, mesh=mesh, in_specs=in_specs, out_specs=(blhd, blhd),
                         check_vma=False)


def _tpu_table(x):
    """A table for the 'tpu' layout: rows padded to a multiple of 8 and folded into (8, D)
    tiles, [Rp/8, 8, D] ([H, Rp/8, 8, D] per head); the kernel reads row r from tile r // 8
    (tile.table_row). Padding rows are zero and never indexed; gradients: JAX un-pads."""
    rows = x.shape[-2]
    pad = -rows % 8
    if pad:
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, pad), (0, 0)])
    return x.reshape(x.shape[:-2] + ((rows + pad) // 8, 8, x.shape[-1]))
