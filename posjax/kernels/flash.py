"""Flash attention in Pallas (forward + FlashAttention-2 backward) with position hooks fused.

Layout inside: q, k, v [B, H, L, D] with L padded to whole blocks (dispatch.py pads and builds
the static `Static`; schemes.py the small per-scheme arrays). Three kernels, each on a grid of
(batch, head, block) (+ an inner axis over the other sequence's blocks in the 'tpu' layout,
where "loop" below means that axis):

  forward  grid over query blocks, loop over key blocks: online softmax (running max m, sum
           l, accumulator), writes out [B, H, Lq, D] and logsumexp [B, H, Lq, W].
  dq       grid over query blocks, loop over key blocks: recomputes each tile from the saved
           logsumexp, accumulates dq, and the scheme-parameter gradients of its query block
           (KERPLE r1/r2, T5 column, Shaw and DeBERTa tables) into partial outputs that
           vjp.py sums: one per program in 'flat' (no cross-program atomics, so the
           (batch, head, block) axes stay parallel), one per (batch, head) in 'tpu', where
           the query-block axis runs in order and accumulates into a resident block
           (the passes' grids, inputs and reductions: vjp.py, the custom_vjp).
  dkv      grid over key blocks, loop over query blocks: accumulates dk, dv.

Positions, validity, segments and the log-n factor travel as O(L) arrays and are sliced per
tile, so every position term is computed on chip (fused.py) and memory stays O(L).

Layouts: the block shapes of every input ('flat' for Triton and interpret mode, 'tpu' for
Mosaic), the per-row accessors and the pallas_call plumbing live in layout.py; the kernel
bodies below are the same for both. In the 'tpu' layout the other sequence is streamed one
block per step of a 4th ('arbitrary') grid axis with the loop carries in VMEM scratch; the
tile step (`step` in each kernel, `_tile`) is shared, only the driver (`_loop`, `_at_end`,
`_inner`) differs.

Masks are by POSITION (causal: k_pos <= q_pos; a local layer's window: |q_pos - k_pos| <=
window // 2, causal 0 <= q_pos - k_pos < window), so a tile is not ruled out by its block
index alone: each tile's mask is computed first (cheap integer work) and a tile where no pair
may attend is skipped with lax.cond (`_loop`), which is exact for any positions. A local layer
also walks only the band of blocks its window reaches by array index (band.py: the loop's
bounds, or the streamed axis's blocks), when positions allow it (checked on the data), so it
costs O(L x window), not O(L^2) tile visits.

Learned attention sinks are applied outside the kernels (dispatch.py) from the forward's
logsumexp, which is therefore a differentiable output of the custom_vjp (vjp.py).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from posjax.attention.tiles import MASK_VALUE
from posjax.kernels import band as bandlib
from posjax.kernels import fused as fz
from posjax.kernels import tokens
from posjax.kernels.fused import F32, Fused
from posjax.kernels.layout import Static, band_sides, col, named_refs, row, store_col

# MASK_VALUE is finite (not -inf): a fully masked tile gives exp(MASK - MASK) = 1, which the
# explicit `where(mask, p, 0)` then zeroes; -inf would give NaN.


# -- the shared tile computation -----------------------------------------------------------


def _mask(st: Static, r, qsl, ksl, qpos, kpos):
    """[bq, bk] bool of the pairs that may attend, or None when nothing is masked.
    qpos [bq, 1] column, kpos [1, bk] row."""
    mask = None
    if "kvalid" in r:
        mask = row(r["kvalid"], ksl) != 0
    if "qseg" in r:
        same = col(r["qseg"], qsl) == row(r["kseg"], ksl)
        mask = same if mask is None else mask & same
    if st.causal:
        before = kpos <= qpos
        mask = before if mask is None else mask & before
    if st.window is not None:  # tiles.window_mask, by positions
        rel = qpos - kpos
        near = rel < st.window if st.causal else jnp.abs(rel) <= st.window // 2
        mask = near if mask is None else mask & near
    if mask is not None:
        mask = jnp.broadcast_to(mask, (qpos.shape[0], kpos.shape[1]))
    return mask


def _loop(st: Static, r, n: int, slices, step, init, scratch=(), q_blocked: bool = True):
    """Run step(i, carry, mask) -> carry over the n tiles of the other sequence, or with
    st.band 'on' over the band of this program's block (band.py; q_blocked: this program
    owns a query block, else a key block); slices(i) -> (qsl, ksl) selects a tile's rows in
    the refs.

    'flat': a fori_loop over the other sequence (its band). Streaming ('tpu'): this grid
    step's ONE tile (the inner grid index j: tile j, or tile lo + j of the band, whose block
    the index maps fetched; a step past the band's end leaves the carry as it is), with the
    carry read from and written back to the VMEM scratch refs (initialised at the first
    inner step); the result is complete at the last inner step (`_at_end`).

    A tile where no pair may attend (causal by position, padding, other segments) is skipped
    with lax.cond: it would add exactly 0 to every accumulator (p = 0 there, and the running
    max cannot move), so skipping is exact and makes causal / packed inputs cheaper without
    assuming sorted positions.
    """

    def body(i, carry):
        qsl, ksl = slices(i)
        mask = _mask(st, r, qsl, ksl, col(r["qpos"], qsl), row(r["kpos"], ksl))
        if mask is None or not st.skip_empty_tiles:
            return step(i, carry, mask)
        live = fz.tile_min_max(mask.astype(jnp.int32))[1] > 0
        return lax.cond(live, lambda c: step(i, c, mask), lambda c: c, carry)

    lo, hi = 0, n
    if st.band == "on":  # read here: interpret mode resolves program ids at the top level only
        own, other, before, after = band_sides(st, q_blocked)
        i = pl.program_id(2) + st.q_offset if q_blocked else pl.program_id(2)
        n_other = st.blocks[1] if q_blocked else st.blocks[0]  # `n` is 1 when streaming
        lo, hi = bandlib.block_range(i, own, other, n_other, before, after)
    if not st.streams:
        return lax.fori_loop(lo, hi, body, init)
    j = pl.program_id(3)
    leaves, tree = jax.tree.flatten(init)

    @pl.when(j == 0)
    def _():
        for ref, x in zip(scratch, leaves, strict=True):
            ref[...] = x

    carry = tree.unflatten([ref[...] for ref in scratch])
    if st.band == "on":
        carry = lax.cond(lo + j < hi, lambda c: body(lo + j, c), lambda c: c, carry)
    else:
        carry = body(j, carry)
    for ref, x in zip(scratch, jax.tree.leaves(carry), strict=True):
        ref[...] = x
    return carry


def _at_end(st: Static):
    """Decorator running the epilogue (output writes) now ('flat') or only at the last inner
    grid step (streaming), as a pl.when."""
    if not st.streams:
        return lambda fn: fn()
    return pl.when(pl.program_id(3) == pl.num_programs(3) - 1)


def _inner(st: Static, i, size: int):
    """Rows of tile i of the other sequence: a slice of the whole ref ('flat') or all of the
    streamed block."""
    if st.streams:
        return slice(None)
    return pl.ds(pl.multiple_of(i * size, size), size)


def _tile(st: Static, r, qsl, ksl, q_pieces, k_pieces, mask):
    """Final logits of one tile (scaled, biased, log-n, masked) and what the backward needs."""
    f = st.fused
    qpos, kpos = col(r["qpos"], qsl), row(r["kpos"], ksl)
    s = fz.raw_logits(q_pieces, k_pieces)
    table = None
    if f.kind == "table":
        table = fz.table_index(f, qpos, kpos)
        q_whole = q_pieces[0]
        s = s + fz.gather_rows(q_whole, r["tabk"], *table, cast_to=q_whole.dtype)
    deb = None
    if f.kind == "deberta":
        c2p = fz.deberta_index(f, qpos, kpos, p2c=False) if f.c2p else None
        p2c = fz.deberta_index(f, qpos, kpos, p2c=True) if f.p2c else None
        if c2p is not None:
            s = s + fz.gather_rows(q_pieces[0], r["hk"], *c2p, cast_to=q_pieces[0].dtype)
        if p2c is not None:
            # Key-major [bk, bq] index: the p2c term k_j . Qr[idx_ij] is then the same
            # row-wise gather as c2p (one aligned 2-D transpose per tile instead of turning
            # per-key reductions from sublanes into lanes).
            p2c = (p2c[0].T,) + p2c[1:]
            s = s + fz.gather_rows(k_pieces[0], r["hq"], *p2c, cast_to=k_pieces[0].dtype).T
        deb = (c2p, p2c)  # p2c index key-major
    s = s * f.scale
    b = fz.bias(f, qpos, kpos, r.get("hp"))
    if b is not None:
        s = s + b
    if f.kind == "fox":  # c_q - c_k from the prepared per-token sums (tokens.py)
        s = s + tokens.tile_bias(qpos, kpos, col(r["cq"], qsl), row(r["ck"], ksl))
    factor = None
    if "factor" in r:
        factor = col(r["factor"], qsl).astype(F32)
        s = s * factor
    if mask is not None:
        s = jnp.where(mask, s, MASK_VALUE)
    return s, mask, factor, table, deb


def _tabv(r):
    return r["tabv"] if "tabv" in r else r.get("tabk")


def _ds(st: Static, r, p, do, v, delta, table, factor):
    """Gradients w.r.t. the final logits (ds), the pre-log-n logits (dlog: what the bias
    sees) and the raw logits (draw = dlog * scale)."""
    dp = fz.dot_nt(do, v)
    if table is not None:
        dp = dp + fz.gather_rows(do, _tabv(r), *table)
    ds = p * (dp - delta)
    dlog = ds * factor if factor is not None else ds
    return dlog, dlog * st.fused.scale


def _store_pieces(st: Static, ref, grads) -> None:
    cols = fz.pieces(st.fused, ref.shape[-1])
    for (a, b), g in zip(cols, grads):
        ref[:, pl.ds(a, b - a)] = g.astype(ref.dtype)


# -- kernels -------------------------------------------------------------------------------


def fwd_kernel(*refs, names, st: Static, n_out: int):
    r = named_refs(names, refs, st)
    o_ref, lse_ref = refs[len(names):len(names) + n_out]
    f, bk = st.fused, st.block_k
    bq, dim = o_ref.shape
    all_rows = slice(None)
    q_pieces, _ = fz.load_tile(f, r["q"], all_rows, col(r["qpos"], all_rows), r, 1)

    def key_rows(j):
        return all_rows, _inner(st, j, bk)

    def step(j, carry, mask):
        m_prev, l_prev, acc = carry  # m, l: [bq, 1] columns
        ksl = key_rows(j)[1]
        k_pieces, _ = fz.load_tile(f, r["k"], ksl, _key_col(r, ksl, f), r, -1)
        s, mask, _, table, _ = _tile(st, r, all_rows, ksl, q_pieces, k_pieces, mask)
        m = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        alpha = jnp.exp(m_prev - m)
        p = jnp.exp(s - m)
        if mask is not None:
            p = jnp.where(mask, p, 0.0)
        l = l_prev * alpha + jnp.sum(p, axis=1, keepdims=True)
        v = r["v"][ksl, :]
        acc = acc * alpha + fz.dot_nn(p.astype(v.dtype), v)
        if table is not None:
            acc = acc + fz.scatter_rows(p, _tabv(r), *table, dim)
        return m, l, acc

    init = (jnp.full((bq, 1), MASK_VALUE, F32), jnp.zeros((bq, 1), F32),
            jnp.zeros((bq, dim), F32))
    m, l, acc = _loop(st, r, r["k"].shape[0] // bk, key_rows, step, init,
                      refs[len(names) + n_out:])

    @_at_end(st)
    def _():
        has_keys = l > 0  # a query with no key to attend: output 0, never 0/0
        safe_l = jnp.where(has_keys, l, 1.0)
        o_ref[...] = (acc / safe_l).astype(o_ref.dtype)
        store_col(lse_ref, jnp.where(has_keys, m + jnp.log(safe_l), 0.0))


def _key_col(r, ksl, f: Fused):
    """Key positions of rows `ksl` as a [n, 1] column (only rope rotates key tiles)."""
    return col(r["kposc"], ksl) if f.kind == "rope" else None


def _table_shape(ref) -> tuple[int, int]:
    """[Rp, D] of a table ref in either layout ([Rp, D] or [Rp/8, 8, D])."""
    return math.prod(ref.shape[:-1]), ref.shape[-1]


def dq_kernel(*refs, names, st: Static, n_out: int):
    r = named_refs(names, refs, st)
    outs = refs[len(names):len(names) + n_out]
    f, bk = st.fused, st.block_k
    learn_tables = f.kind == "table" and f.learn_tables
    all_rows = slice(None)
    qpos = col(r["qpos"], all_rows)
    q_pieces, trig = fz.load_tile(f, r["q"], all_rows, qpos, r, 1)
    do, lse, delta = r["do"][...], col(r["lse"], all_rows), col(r["delta"], all_rows)

    def key_rows(j):
        return all_rows, _inner(st, j, bk)

    def step(j, carry, mask):
        dq, dhp, dtabs, dc = carry
        ksl = key_rows(j)[1]
        kpos = row(r["kpos"], ksl)
        k_pieces, _ = fz.load_tile(f, r["k"], ksl, _key_col(r, ksl, f), r, -1)
        s, mask, factor, table, deb = _tile(st, r, all_rows, ksl, q_pieces, k_pieces, mask)
        p = jnp.exp(s - lse)
        if mask is not None:
            p = jnp.where(mask, p, 0.0)
        dlog, draw = _ds(st, r, p, do, r["v"][ksl, :], delta, table, factor)
        dq = tuple(acc + fz.dot_nn(draw.astype(kp.dtype), kp) for acc, kp in zip(dq, k_pieces))
        if table is not None:
            dq = (dq[0] + fz.scatter_rows(draw, r["tabk"], *table, dq[0].shape[-1]),)
            if learn_tables:
                dtabs = fz.table_grads(draw, p, q_pieces[0], do, *table, *dtabs)
        if f.learns_hp:
            dhp = fz.bias_param_grads(f, dlog, qpos, kpos, r["hp"], dhp)
        if deb is not None:
            c2p, p2c = deb
            dim = dq[0].shape[-1]
            g_hk, g_hq = dtabs
            if c2p is not None:
                dq = (dq[0] + fz.scatter_rows(draw, r["hk"], *c2p, dim),)
                g_hk = fz.table_grad(draw, q_pieces[0], *c2p, g_hk)
            if p2c is not None:
                g_hq = fz.table_grad(draw.T, k_pieces[0], *p2c, g_hq)
            dtabs = (g_hk, g_hq)
        if dc is not None:
            dc = dc + tokens.tile_grads(dlog, qpos, kpos)[0]
        return dq, dhp, dtabs, dc

    # Parameter gradients live in loop carries and are written once at the end.
    dhp = jnp.zeros((1, outs[1].shape[-1]), F32) if f.learns_hp else None
    dtabs = (jnp.zeros(_table_shape(r["tabk"]), F32),) * 2 if learn_tables else None
    if f.kind == "deberta":  # (d Kr, d Qr) of this head; None for a term that is off
        dtabs = tuple(jnp.zeros(_table_shape(r[n]), F32) if n in r else None
                      for n in ("hk", "hq"))
    dc = jnp.zeros((qpos.shape[0], 1), F32) if f.kind == "fox" else None
    init = (tuple(jnp.zeros(x.shape, F32) for x in q_pieces), dhp, dtabs, dc)
    dq, dhp, dtabs, dc = _loop(st, r, r["k"].shape[0] // bk, key_rows, step, init,
                               refs[len(names) + n_out:])
    if dc is not None:  # FoX's dc is the last output (vjp._dq_pass)
        dc_ref, outs = outs[-1], outs[:-1]

    # Read here, not inside the pl.when bodies below (interpret mode resolves program ids
    # only at the kernel's top level).
    first_block = pl.program_id(2) == 0

    @_at_end(st)
    def _():
        _store_pieces(st, outs[0], fz.unrotate(dq, trig))
        grads = [dhp] if dhp is not None else []
        grads += [x for x in dtabs if x is not None] if dtabs is not None else []
        for ref, value in zip(outs[1:], grads, strict=True):
            _store_partial(st, ref, value, first_block)
        if dc is not None:
            store_col(dc_ref, dc)


def _store_partial(st: Static, ref, value, first) -> None:
    """Write this program's parameter-gradient partial: its own block ('flat'), or, in the
    'tpu' layout, into the (batch, head) block shared by all query blocks: set by the first
    query block (`first`), added to by the others (see _backward)."""
    if not st.streams:
        ref[...] = value
        return

    @pl.when(first)
    def _():
        ref[...] = value

    @pl.when(jnp.logical_not(first))
    def _():
        ref[...] += value


def dkv_kernel(*refs, names, st: Static, n_out: int):
    r = named_refs(names, refs, st)
    dk_ref, dv_ref = refs[len(names):len(names) + 2]
    dc_ref = refs[len(names) + 2] if n_out > 2 else None  # FoX's dc of the keys
    f, bq = st.fused, st.block_q
    all_rows = slice(None)
    k_pieces, trig = fz.load_tile(f, r["k"], all_rows, _key_col(r, all_rows, f), r, -1)
    v = r["v"][...]

    def query_rows(i):
        return _inner(st, i, bq), all_rows

    def step(i, carry, mask):
        dk, dv, dc = carry
        qsl = query_rows(i)[0]
        q_pieces, _ = fz.load_tile(f, r["q"], qsl, col(r["qpos"], qsl), r, 1)
        s, mask, factor, table, deb = _tile(st, r, qsl, all_rows, q_pieces, k_pieces, mask)
        p = jnp.exp(s - col(r["lse"], qsl))
        if mask is not None:
            p = jnp.where(mask, p, 0.0)
        do = r["do"][qsl, :]
        dv = dv + fz.dot_tn(p.astype(do.dtype), do)
        dlog, draw = _ds(st, r, p, do, v, col(r["delta"], qsl), table, factor)
        dk = tuple(acc + fz.dot_tn(draw.astype(qp.dtype), qp) for acc, qp in zip(dk, q_pieces))
        if deb is not None and deb[1] is not None:  # p2c: k_j . Qr[idx] -> dk_j
            dk = (dk[0] + fz.scatter_rows(draw.T, r["hq"], *deb[1], dk[0].shape[-1]),)
        if dc is not None:
            dc = dc + tokens.tile_grads(dlog, col(r["qpos"], qsl), row(r["kpos"], all_rows))[1]
        return dk, dv, dc

    dc = jnp.zeros((1, v.shape[0]), F32) if dc_ref is not None else None
    init = (tuple(jnp.zeros(x.shape, F32) for x in k_pieces), jnp.zeros(v.shape, F32), dc)
    dk, dv, dc = _loop(st, r, r["q"].shape[0] // bq, query_rows, step, init,
                       refs[len(names) + n_out:], q_blocked=False)

    @_at_end(st)
    def _():
        _store_pieces(st, dk_ref, fz.unrotate(dk, trig))
        dv_ref[...] = dv.astype(dv_ref.dtype)
        if dc is not None:
            dc_ref[...] = jnp.broadcast_to(dc, dc_ref.shape)
