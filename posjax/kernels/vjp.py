"""The custom_vjp around the kernels of flash.py: how each pass (forward, dq, dkv) is laid out
on its grid, what it reads and writes, and how parameter gradients are reduced.

  forward  grid (b, h, query block): out [B, H, Lq, D] and logsumexp.
  dq       grid (b, h, query block): dq, and the gradients of the term arrays that
           terms name for this pass (Term.grads): per-head scalars and tables as partial
           sums, one per program in 'flat' (Triton programs run concurrently; no
           cross-program accumulation) summed here, one per (batch, head) in 'tpu' (the
           query-block axis runs in order and accumulates into a resident block); per-query
           sums (FoX) as [bq, W] column blocks. In 'flat' with partial sums the pass runs in
           chunks of DQ_CHUNK_BLOCKS query blocks, each chunk's partials summed before the
           next, so they take O(chunk x table) memory, not O(L / block_q x table)
           (DeBERTa's tables at 32k tokens: ~128 MiB per batch row and head).
  dkv      grid (b, h, key block): dk, dv, and per-key sums (FoX) as [S, bk] row blocks.

How each gradient is laid out and reduced follows from its array's placement
(terms/base.py), so a new term needs nothing here.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from posjax.kernels.flash import dkv_kernel, dq_kernel, fwd_kernel
from posjax.kernels.layout import Static, call, seq_axis, term_arrays
from posjax.kernels.terms.base import HEAD_SCALARS, KEY_TOKENS, QUERY_TOKENS, SUMMED, TABLE
from posjax.kernels.tile import F32

# Query blocks per dq launch in the 'flat' layout when the scheme has learnable parameters
# (see the module docstring); enough programs per launch to fill a GPU (x batch x heads).
DQ_CHUNK_BLOCKS = 32


def _inputs(st: Static, q, k, v, arrays, aux, **extra) -> dict:
    return {"q": q, "k": k, "v": v, **extra, **aux, **term_arrays(st, arrays)}


def _forward(st: Static, q, k, v, arrays, aux):
    b, h, lq, d = q.shape
    nq = lq // st.block_q
    dv = v.shape[-1]  # the value width may differ from q/k's (padded rope halves)
    w = st.lanes
    out_shape = [jax.ShapeDtypeStruct((b, h, lq, dv), q.dtype),
                 jax.ShapeDtypeStruct((b, h, lq, w), F32)]  # logsumexp, lane-broadcast
    out_specs = [pl.BlockSpec((None, None, st.block_q, dv), _own_block),
                 pl.BlockSpec((None, None, st.block_q, w), _own_block)]
    inputs = _inputs(st, q, k, v, arrays, aux)
    carry = [(st.block_q, 1), (st.block_q, 1), (st.block_q, dv)]  # m, l, acc
    return _either(st, inputs, lambda st, inputs: call(
        fwd_kernel, st, inputs, True, (b, h, nq), out_shape, out_specs, "posjax_flash_fwd",
        carry))


def _either(st: Static, inputs: dict, run):
    """run(st, inputs) with st.band 'checked' resolved (band.py): a lax.cond between the
    band's kernel ('on') when the inputs' flag 'band_ok' [B] holds for every row, and every
    block's ('off') otherwise. The flag is no kernel input."""
    inputs = dict(inputs)
    ok = inputs.pop("band_ok", None)
    if st.band != "checked":
        return run(st, inputs)
    on, off = (dataclasses.replace(st, band=mode) for mode in ("on", "off"))
    return jax.lax.cond(jnp.all(ok != 0), lambda: run(on, inputs), lambda: run(off, inputs))


def _own_block(b, h, i, *_):
    """Index map of an output block of this program's own (b, h, block)."""
    return b, h, i, 0


def _own_partial(b, h, i, *_):
    """Index map of a per-program partial parameter gradient [B, H, n, R, C]."""
    return b, h, i, 0, 0


def _head_partial(b, h, *_):
    """Index map of a per-(batch, head) parameter gradient [B, H, 1, R, C] ('tpu' layout):
    the same block for every query block, so it stays resident in VMEM and accumulates."""
    return b, h, 0, 0, 0


def _key_rows(b, h, i, *_):
    """Index map of a per-key output [B, H, S, Lk] of the dkv pass's key block i."""
    return b, h, 0, i


def _summed(st: Static, pass_: str) -> bool:
    """Whether the pass returns partial sums (per-head scalars or tables)."""
    return any(st.inputs[n] in SUMMED for n in st.grads(pass_))


def _backward(st: Static, res, cotangents):
    q, k, v, arrays, aux, out, lse = res
    do, dlse = cotangents
    b, h, lq, d = q.shape
    nq, nk = lq // st.block_q, k.shape[2] // st.block_k
    # delta_i = dO_i . O_i: O(L) work, plain XLA (fuses into one pass). A cotangent of the
    # logsumexp (d lse_i / d s_ij = p_ij) enters every ds_ij = p_ij (dp_ij - delta_i) as
    # + p_ij dlse_i, i.e. as delta_i - dlse_i.
    delta = jnp.sum(out.astype(F32) * do.astype(F32), axis=-1, keepdims=True)
    delta = delta - dlse[..., None].astype(F32)
    delta = jnp.broadcast_to(delta, delta.shape[:-1] + (st.lanes,))
    inputs = _inputs(st, q, k, v, arrays, aux, do=do, lse=lse, delta=delta)

    pieces = st.pieces(d)  # carries: one accumulator per column piece
    dq_names = st.grads("dq")
    if st.streams or not _summed(st, "dq") or nq <= DQ_CHUNK_BLOCKS:
        dq_out = _dq_pass(st, inputs, nq, pieces)
    else:  # 'flat' with parameter gradients: chunks of query blocks (module docstring)
        chunks = []
        for lo in range(0, nq, DQ_CHUNK_BLOCKS):
            hi = min(lo + DQ_CHUNK_BLOCKS, nq)
            # With a band the kernel needs the chunk's first query block (q_offset).
            chunk_st = st if st.band == "off" else dataclasses.replace(st, q_offset=lo)
            part = _dq_pass(chunk_st, _query_rows(st, inputs, lo * st.block_q,
                                                  hi * st.block_q), hi - lo, pieces)
            chunks.append([part[0]] + [jnp.sum(x, axis=2, keepdims=True)
                                       if st.inputs[n] in SUMMED else x
                                       for n, x in zip(dq_names, part[1:])])
        dq_out = [jnp.concatenate([c[0] for c in chunks], axis=2)]
        for i, name in enumerate(dq_names, start=1):
            parts = [c[i] for c in chunks]
            dq_out.append(sum(parts) if st.inputs[name] in SUMMED
                          else jnp.concatenate(parts, axis=2))
    dq = dq_out[0]

    k_block = pl.BlockSpec((None, None, st.block_k, d), _own_block)
    v_block = pl.BlockSpec((None, None, st.block_k, v.shape[-1]), _own_block)
    dkv_carry = [(st.block_k, hi - lo) for lo, hi in pieces] + [(st.block_k, v.shape[-1])]
    dkv_shapes = [jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)]
    dkv_specs = [k_block, v_block]
    dkv_names = st.grads("dkv")
    for name in dkv_names:  # per-key sums, a [1, bk] row per program
        if st.inputs[name] != KEY_TOKENS:
            raise ValueError(f"the dkv pass returns per-key sums only, not {name!r}")
        x = inputs[name]  # [B, H, S, Lk]
        dkv_shapes.append(jax.ShapeDtypeStruct(x.shape, F32))
        dkv_specs.append(pl.BlockSpec((None, None, x.shape[2], st.block_k), _key_rows))
    dkv_carry += [(1, st.block_k)] * len(dkv_names)  # (sorted names: flash._loop's order)
    dk, dv, *dkv_out = _either(st, inputs, lambda st, inputs: call(
        dkv_kernel, st, inputs, False, (b, h, nk), dkv_shapes, dkv_specs, "posjax_flash_dkv",
        dkv_carry))

    grads = {name: jnp.zeros_like(x) for name, x in arrays.items()}
    for name, x in zip(dq_names, dq_out[1:]):
        grads[name] = _reduce(st.inputs[name], x, arrays[name])
    for name, x in zip(dkv_names, dkv_out):
        grads[name] = _reduce(st.inputs[name], x, arrays[name])
    return dq, dk, dv, grads, None


def _reduce(place: str, out, arg):
    """The gradient of a term array `arg` from its pass output: partial sums [B, H, n, R, C]
    summed over the batch and the programs (and the heads for a shared table), per-token
    sums read off their lane / sublane."""
    if place == HEAD_SCALARS:
        return jnp.sum(out, axis=(0, 2, 3))  # [H, P]
    if place == TABLE:  # reshape: [Rp, D] -> [Rp/8, 8, D] for 'tpu'
        return jnp.sum(out, axis=(0, 1, 2)).reshape(arg.shape)
    if place in SUMMED:  # per-head tables: sum over batch and query blocks only
        return jnp.sum(out, axis=(0, 2)).reshape(arg.shape)
    if place == QUERY_TOKENS:
        return out[..., 0]
    return out[:, :, 0, :]


def _query_rows(st: Static, inputs: dict, lo: int, hi: int) -> dict:
    """The inputs with every query-side array cut to query rows [lo, hi) (key side whole)."""
    out = {}
    for name, x in inputs.items():
        seq = seq_axis(st, name)
        if seq is not None and seq[0] == "q":
            x = jax.lax.slice_in_dim(x, lo, hi, axis=seq[1])
        out[name] = x
    return out


def _dq_pass(st: Static, inputs: dict, nq: int, pieces) -> list:
    """[dq] + the term-gradient outputs of one dq launch over nq query blocks.

    Partial sums: [B, H, n_part, R, C], one per program ('flat': Triton programs run
    concurrently and Pallas has no cross-program accumulation), or [B, H, 1, R, C] ('tpu':
    the grid runs in order on each core, so the query-block axis runs 'arbitrary' and
    accumulates into one resident block per (batch, head)). Per-query sums: [B, H, Lq, W].
    """
    b, h, _, d = inputs["q"].shape
    n_part, part_index = (1, _head_partial) if st.streams else (nq, _own_partial)
    dq_shapes = [jax.ShapeDtypeStruct((b, h, nq * st.block_q, d), inputs["q"].dtype)]
    dq_specs = [pl.BlockSpec((None, None, st.block_q, d), _own_block)]
    carries = {}
    for name in st.grads("dq"):
        place, x = st.inputs[name], inputs[name]
        if place in SUMMED:
            # [R, C] of [H, P] (per-head (1, P)), shared [Rp, D] / [Rp/8, 8, D] or per-head
            # [H, Rp, D] / [H, Rp/8, 8, D]
            rows = x.shape[int(place != TABLE):-1]
            shape = (math.prod(rows), x.shape[-1])
            dq_shapes.append(jax.ShapeDtypeStruct((b, h, n_part) + shape, F32))
            dq_specs.append(pl.BlockSpec((None, None, None) + shape, part_index))
            carries[name] = shape
        elif place == QUERY_TOKENS:  # [B, H, Lq, W], a [bq, W] column block per program
            dq_shapes.append(jax.ShapeDtypeStruct((b, h, nq * st.block_q, st.lanes), F32))
            dq_specs.append(pl.BlockSpec((None, None, st.block_q, st.lanes), _own_block))
            carries[name] = (st.block_q, 1)
        else:
            raise ValueError(f"the dq pass returns no gradient of {name!r} ({place})")
    # Scratch carries in flash._loop's order: the dq pieces, then the gradient dict by name.
    dq_carry = [(st.block_q, hi - lo) for lo, hi in pieces] + [carries[n] for n in sorted(carries)]
    return list(_either(st, inputs, lambda st, inputs: call(
        dq_kernel, st, inputs, True, (b, h, nq), dq_shapes, dq_specs, "posjax_flash_dq",
        dq_carry, sequential_blocks=st.streams and _summed(st, "dq"))))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def flash_vjp(st: Static, q, k, v, arrays, aux):
    """(out [B, H, Lq, D], logsumexp [B, H, Lq]) for padded [B, H, L, D] inputs (lse 0 for a
    query with no key). `arrays`: the terms' arrays by name (terms/base.py placements),
    differentiable: the gradients the terms name are exact sums over all tiles, the others
    zero; lse is differentiable too (attention sinks read it); `aux` (positions, masks,
    log-n factor, RoPE frequencies) is not."""
    out, lse = _forward(st, q, k, v, arrays, aux)
    return out, lse[..., 0]


def _flash_fwd(st, q, k, v, arrays, aux):
    out, lse = _forward(st, q, k, v, arrays, aux)
    return (out, lse[..., 0]), (q, k, v, arrays, aux, out, lse)


flash_vjp.defvjp(_flash_fwd, _backward)
