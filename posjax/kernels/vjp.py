"""The custom_vjp around the kernels of flash.py: how each pass (forward, dq, dkv) is laid out
on its grid, what it reads and writes, and how parameter gradients are reduced.

  forward  grid (b, h, query block): out [B, H, Lq, D] and logsumexp.
  dq       grid (b, h, query block): dq, and the partial gradients of the scheme's learnable
           parameters: one per program in 'flat' (Triton programs run concurrently; no
           cross-program accumulation) summed here, one per (batch, head) in 'tpu' (the
           query-block axis runs in order and accumulates into a resident block). In 'flat'
           the pass runs in chunks of DQ_CHUNK_BLOCKS query blocks, each chunk's partials
           summed before the next, so they take O(chunk x table) memory, not O(L / block_q
           x table) (DeBERTa's tables at 32k tokens: ~128 MiB per batch row and head).
  dkv      grid (b, h, key block): dk, dv.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from posjax.kernels import fused as fz
from posjax.kernels import tokens
from posjax.kernels.flash import dkv_kernel, dq_kernel, fwd_kernel
from posjax.kernels.fused import F32, Fused
from posjax.kernels.layout import SEQ, Static, call

# Query blocks per dq launch in the 'flat' layout when the scheme has learnable parameters
# (see the module docstring); enough programs per launch to fill a GPU (x batch x heads).
DQ_CHUNK_BLOCKS = 32


def _table_names(f: Fused) -> tuple[str, str]:
    """Kernel input names of the two table arguments: shared [Rp, D] tables (Shaw/NEZHA) or
    per-head [H, Rp, D] tables (DeBERTa Kr, Qr)."""
    return ("hk", "hq") if f.kind == "deberta" else ("tabk", "tabv")


def _inputs(st: Static, q, k, v, hp, tabk, tabv, tok, aux, **extra) -> dict:
    inputs = {"q": q, "k": k, "v": v, **extra, **aux}
    if tok is not None:  # FoX's c of the queries and of the keys (tokens.py)
        inputs.update(tokens.to_layout(*tok, st.lanes, st.sublanes))
    names = ("hp",) + _table_names(st.fused)
    for name, x in zip(names, (hp, tabk, tabv)):
        if x is not None:
            inputs[name] = x
    return inputs


def _forward(st: Static, q, k, v, hp, tabk, tabv, tok, aux):
    b, h, lq, d = q.shape
    nq = lq // st.block_q
    dv = v.shape[-1]  # the value width may differ from q/k's (padded rope halves)
    w = st.lanes
    out_shape = [jax.ShapeDtypeStruct((b, h, lq, dv), q.dtype),
                 jax.ShapeDtypeStruct((b, h, lq, w), F32)]  # logsumexp, lane-broadcast
    out_specs = [pl.BlockSpec((None, None, st.block_q, dv), _own_block),
                 pl.BlockSpec((None, None, st.block_q, w), _own_block)]
    inputs = _inputs(st, q, k, v, hp, tabk, tabv, tok, aux)
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


def _backward(st: Static, res, cotangents):
    q, k, v, hp, tabk, tabv, tok, aux, out, lse = res
    do, dlse = cotangents
    f = st.fused
    b, h, lq, d = q.shape
    nq, nk = lq // st.block_q, k.shape[2] // st.block_k
    # delta_i = dO_i . O_i: O(L) work, plain XLA (fuses into one pass). A cotangent of the
    # logsumexp (d lse_i / d s_ij = p_ij) enters every ds_ij = p_ij (dp_ij - delta_i) as
    # + p_ij dlse_i, i.e. as delta_i - dlse_i.
    delta = jnp.sum(out.astype(F32) * do.astype(F32), axis=-1, keepdims=True)
    delta = delta - dlse[..., None].astype(F32)
    delta = jnp.broadcast_to(delta, delta.shape[:-1] + (st.lanes,))
    inputs = _inputs(st, q, k, v, hp, tabk, tabv, tok, aux, do=do, lse=lse, delta=delta)

    pieces = fz.pieces(f, d)  # carries: one accumulator per column piece
    learned = _learned_tables(f, tabk, tabv)
    if st.streams or not (f.learns_hp or learned) or nq <= DQ_CHUNK_BLOCKS:
        dq_out = _dq_pass(st, inputs, nq, hp, learned, pieces)
    else:  # 'flat' with parameter gradients: chunks of query blocks (module docstring)
        chunks = []
        for lo in range(0, nq, DQ_CHUNK_BLOCKS):
            hi = min(lo + DQ_CHUNK_BLOCKS, nq)
            # With a band the kernel needs the chunk's first query block (q_offset).
            chunk_st = st if st.band == "off" else dataclasses.replace(st, q_offset=lo)
            part = _dq_pass(chunk_st, _query_rows(inputs, lo * st.block_q, hi * st.block_q),
                            hi - lo, hp, learned, pieces)
            chunks.append([part[0]] + [jnp.sum(x, axis=2, keepdims=True) for x in part[1:]])
        dq_out = [jnp.concatenate([c[0] for c in chunks], axis=2)]
        dq_out += [sum(c[i] for c in chunks) for i in range(1, len(chunks[0]))]
    dq = dq_out[0]

    k_block = pl.BlockSpec((None, None, st.block_k, d), _own_block)
    v_block = pl.BlockSpec((None, None, st.block_k, v.shape[-1]), _own_block)
    dkv_carry = [(st.block_k, hi - lo) for lo, hi in pieces] + [(st.block_k, v.shape[-1])]
    dkv_shapes = [jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)]
    dkv_specs = [k_block, v_block]
    if tok is not None:  # FoX: dc of the keys, a [1, bk] row per program
        shape, spec = tokens.key_output(tok[1].shape, st.block_k, st.sublanes)
        dkv_shapes.append(shape)
        dkv_specs.append(spec)
        dkv_carry.append((1, st.block_k))
    dk, dv, *dck = _either(st, inputs, lambda st, inputs: call(
        dkv_kernel, st, inputs, False, (b, h, nk), dkv_shapes, dkv_specs, "posjax_flash_dkv",
        dkv_carry))
    dtok = None
    if tok is not None:
        dtok = (dq_out[-1][..., 0], dck[0][:, :, 0, :])
        dq_out = dq_out[:-1]

    dhp = None if hp is None else jnp.zeros_like(hp)
    if f.learns_hp:
        dhp = jnp.sum(dq_out[1], axis=(0, 2, 3))  # [H, P]: sum of per-program partials
    dtabk = None if tabk is None else jnp.zeros_like(tabk)
    dtabv = None if tabv is None else jnp.zeros_like(tabv)
    if f.kind == "table" and f.learn_tables:  # reshape: [Rp, D] -> [Rp, 1, D] for 'tpu'
        dtabk = jnp.sum(dq_out[1], axis=(0, 1, 2)).reshape(tabk.shape)
        dtabv = jnp.sum(dq_out[2], axis=(0, 1, 2)).reshape(tabv.shape)
    if f.kind == "deberta":  # per-head tables: sum over batch and query blocks only
        partial = iter(dq_out[1:])
        dtabk = None if tabk is None else jnp.sum(next(partial), axis=(0, 2)).reshape(tabk.shape)
        dtabv = None if tabv is None else jnp.sum(next(partial), axis=(0, 2)).reshape(tabv.shape)
    return dq, dk, dv, dhp, dtabk, dtabv, dtok, None


def _query_rows(inputs: dict, lo: int, hi: int) -> dict:
    """The inputs with every query-side array cut to query rows [lo, hi) (key side whole)."""
    out = {}
    for name, x in inputs.items():
        if name in SEQ and SEQ[name][0] == "q":
            x = jax.lax.slice_in_dim(x, lo, hi, axis=SEQ[name][1])
        out[name] = x
    return out


def _dq_pass(st: Static, inputs: dict, nq: int, hp, learned: list, pieces) -> list:
    """[dq] + the parameter-gradient partials of one dq launch over nq query blocks.

    Partials: [B, H, nq, R, C], one per program ('flat': Triton programs run concurrently and
    Pallas has no cross-program accumulation), or [B, H, 1, R, C] ('tpu': the grid runs in
    order on each core, so the query-block axis runs 'arbitrary' and accumulates into one
    resident block per (batch, head)).
    """
    f = st.fused
    b, h, _, d = inputs["q"].shape
    n_part, part_index = (1, _head_partial) if st.streams else (nq, _own_partial)
    dq_shapes = [jax.ShapeDtypeStruct((b, h, nq * st.block_q, d), inputs["q"].dtype)]
    dq_specs = [pl.BlockSpec((None, None, st.block_q, d), _own_block)]
    dq_carry = [(st.block_q, hi - lo) for lo, hi in pieces]
    if f.learns_hp:  # [B, H, n_part, 1, P] ((1, P) blocks)
        dq_shapes.append(jax.ShapeDtypeStruct((b, h, n_part, 1, hp.shape[-1]), F32))
        dq_specs.append(pl.BlockSpec((None, None, None, 1, hp.shape[-1]), part_index))
        dq_carry.append((1, hp.shape[-1]))
    for table in learned:  # [B, H, n_part, Rp, D]
        # [Rp, D] of shared [Rp, D] / [Rp/8, 8, D] or per-head [H, Rp, D] / [H, Rp/8, 8, D]
        shape = (math.prod(table.shape[int(f.kind == "deberta"):-1]), table.shape[-1])
        dq_shapes.append(jax.ShapeDtypeStruct((b, h, n_part) + shape, F32))
        dq_specs.append(pl.BlockSpec((None, None, None) + shape, part_index))
        dq_carry.append(shape)
    if f.kind == "fox":  # dc of the queries, a [bq, 1] column per program (last output)
        shape, spec = tokens.query_output((b, h, nq * st.block_q), st.block_q, st.lanes)
        dq_shapes.append(shape)
        dq_specs.append(spec)
        dq_carry.append((st.block_q, 1))
    return list(_either(st, inputs, lambda st, inputs: call(
        dq_kernel, st, inputs, True, (b, h, nq), dq_shapes, dq_specs, "posjax_flash_dq",
        dq_carry, sequential_blocks=st.streams and bool(f.learns_hp or learned))))


def _learned_tables(f: Fused, tabk, tabv) -> list:
    """The table arguments that get gradients (Shaw both, DeBERTa those present)."""
    if f.kind == "table" and f.learn_tables:
        return [tabk, tabv]
    if f.kind == "deberta":
        return [t for t in (tabk, tabv) if t is not None]
    return []


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def flash_vjp(st: Static, q, k, v, hp, tabk, tabv, tok, aux):
    """(out [B, H, Lq, D], logsumexp [B, H, Lq]) for padded [B, H, L, D] inputs (lse 0 for a
    query with no key). hp [H, P], tabk / tabv [Rp, D] are differentiable (their gradients
    are exact sums over all tiles), and so are tok (FoX: None or the float32 sums c of the
    queries [B, H, Lq] and keys [B, H, Lk], tokens.py) and lse (attention sinks read it);
    `aux` (positions, masks, log-n factor, inverse frequencies) is not."""
    out, lse = _forward(st, q, k, v, hp, tabk, tabv, tok, aux)
    return out, lse[..., 0]


def _flash_fwd(st, q, k, v, hp, tabk, tabv, tok, aux):
    out, lse = _forward(st, q, k, v, hp, tabk, tabv, tok, aux)
    return (out, lse[..., 0]), (q, k, v, hp, tabk, tabv, tok, aux, out, lse)


flash_vjp.defvjp(_flash_fwd, _backward)
