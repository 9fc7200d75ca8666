"""Flash attention in Pallas (forward + FlashAttention-2 backward) with position hooks fused.

Layout inside: q, k, v [B, H, L, D] with L padded to whole blocks (dispatch.py pads and builds
the static `Static`; the scheme's term, terms/, its small arrays). Three kernels, each on a grid of
(batch, head, block) (+ an inner axis over the other sequence's blocks in the 'tpu' layout,
where "loop" below means that axis):

  forward  grid over query blocks, loop over key blocks: online softmax (running max m, sum
           l, accumulator), writes out [B, H, Lq, D] and logsumexp [B, H, Lq, W].
  dq       grid over query blocks, loop over key blocks: recomputes each tile from the saved
           logsumexp, accumulates dq, and the gradients of the term arrays of its query block
           (KERPLE r1/r2, T5 column, Shaw and DeBERTa tables, FoX's query sums) into outputs that
           vjp.py sums: one per program in 'flat' (no cross-program atomics, so the
           (batch, head, block) axes stay parallel), one per (batch, head) in 'tpu', where
           the query-block axis runs in order and accumulates into a resident block
           (the passes' grids, inputs and reductions: vjp.py, the custom_vjp).
  dkv      grid over key blocks, loop over query blocks: accumulates dk, dv (and FoX's key
           sums' gradient).

Positions, validity, segments and the log-n factor travel as O(L) arrays and are sliced per
tile, so every position term is computed on chip and memory stays O(L). The kernels know no
scheme: they call the hooks of `st.terms` (terms/base.py) at fixed points of each tile (the
logits before and after the scale, the values, dP, dq / dk and the gradient carries).

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

from posjax.tiling.tiles import MASK_VALUE
from posjax.kernels import band as bandlib
from posjax.kernels import tile as tl
from posjax.kernels.layout import Static, band_sides, named_refs
from posjax.kernels.terms.base import QUERY_TOKENS, SUMMED, Tile
from posjax.kernels.tile import F32, col, row, store_col

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
        live = tl.tile_min_max(mask.astype(jnp.int32))[1] > 0
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


def _load(st: Static, ref, rows, pos, r, side: int):
    """Rows of a [L, D] ref as the kernels' column pieces, in the input dtype, as each term
    loads them (RoPE rotates); pos: [n, 1] column of their positions (None for key rows
    unless st.key_columns); side +1 for queries, -1 for keys. Returns (pieces, a context
    per term for `_unload`)."""
    cols = st.pieces(ref.shape[-1])
    loaded = tuple(ref[rows, pl.ds(a, b - a)] for a, b in cols)
    ctxs = []
    for term in st.terms:
        loaded, ctx = term.load(loaded, pos, r, side)
        ctxs.append(ctx)
    return loaded, tuple(ctxs)


def _unload(st: Static, grads, ctxs):
    """Gradients w.r.t. loaded pieces -> w.r.t. the stored pieces (the loads' transposes)."""
    for term, ctx in reversed(tuple(zip(st.terms, ctxs))):
        grads = term.unrotate(grads, ctx)
    return grads


def _key_col(st: Static, r, ksl):
    """Key positions of rows `ksl` as a [n, 1] column (only for terms that rotate keys)."""
    return col(r["kposc"], ksl) if st.key_columns else None


def _tile(st: Static, r, qsl, ksl, q_pieces, k_pieces, mask):
    """Final logits of one tile (scaled, biased, log-n, masked) and what the backward needs:
    (s, mask, log-n factor, the Tile, each term's context)."""
    t = Tile(col(r["qpos"], qsl), row(r["kpos"], ksl), qsl, ksl, q_pieces, k_pieces)
    s = tl.raw_logits(q_pieces, k_pieces)
    ctxs = []
    for term in st.terms:
        s, ctx = term.logits(r, t, s)
        ctxs.append(ctx)
    s = s * st.scale
    for term in st.terms:
        b = term.bias(r, t)
        if b is not None:
            s = s + b
    factor = None
    if "factor" in r:
        factor = col(r["factor"], qsl).astype(F32)
        s = s * factor
    if mask is not None:
        s = jnp.where(mask, s, MASK_VALUE)
    return s, mask, factor, t, tuple(ctxs)


def _ds(st: Static, r, t: Tile, ctxs, p, do, v, delta, factor):
    """Gradients w.r.t. the final logits (ds), the pre-log-n logits (dlog: what the bias
    sees) and the raw logits (draw = dlog * scale), also stored in the Tile."""
    dp = tl.dot_nt(do, v)
    for term, ctx in zip(st.terms, ctxs):
        extra = term.dp(r, t, ctx, do)
        if extra is not None:
            dp = dp + extra
    ds = p * (dp - delta)
    dlog = ds * factor if factor is not None else ds
    t.p, t.do, t.dlog, t.draw = p, do, dlog, dlog * st.scale
    return t.dlog, t.draw


def _grad_step(st: Static, pass_: str, r, t: Tile, ctxs, grads: dict) -> dict:
    """Each term with gradients in this pass adds the tile's share to its carries."""
    for term, ctx in zip(st.terms, ctxs):
        if pass_ in term.grads().values():
            grads = term.grad_step(pass_, r, t, ctx, grads)
    return grads


def _grad_init(st: Static, pass_: str, r, rows: int) -> dict:
    """Zero carries of the pass's term gradients: [R, C] partial sums of per-head scalars and
    tables (shaped as their refs: [Rp, D] of an [Rp/8, 8, D] table), per-token sums as a
    [rows, 1] column (queries) or a [1, rows] row (keys)."""
    grads = {}
    for name in st.grads(pass_):
        place, ref = st.inputs[name], r[name]
        if place in SUMMED:
            shape = (math.prod(ref.shape[:-1]), ref.shape[-1])
        else:
            shape = (rows, 1) if place == QUERY_TOKENS else (1, rows)
        grads[name] = jnp.zeros(shape, F32)
    return grads


def _store_pieces(st: Static, ref, grads) -> None:
    cols = st.pieces(ref.shape[-1])
    for (a, b), g in zip(cols, grads):
        ref[:, pl.ds(a, b - a)] = g.astype(ref.dtype)


# -- kernels -------------------------------------------------------------------------------


def fwd_kernel(*refs, names, st: Static, n_out: int):
    r = named_refs(names, refs, st)
    o_ref, lse_ref = refs[len(names):len(names) + n_out]
    bk = st.block_k
    bq, dim = o_ref.shape
    all_rows = slice(None)
    q_pieces, _ = _load(st, r["q"], all_rows, col(r["qpos"], all_rows), r, 1)

    def key_rows(j):
        return all_rows, _inner(st, j, bk)

    def step(j, carry, mask):
        m_prev, l_prev, acc = carry  # m, l: [bq, 1] columns
        ksl = key_rows(j)[1]
        k_pieces, _ = _load(st, r["k"], ksl, _key_col(st, r, ksl), r, -1)
        s, mask, _, t, ctxs = _tile(st, r, all_rows, ksl, q_pieces, k_pieces, mask)
        m = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        alpha = jnp.exp(m_prev - m)
        p = jnp.exp(s - m)
        if mask is not None:
            p = jnp.where(mask, p, 0.0)
        l = l_prev * alpha + jnp.sum(p, axis=1, keepdims=True)
        v = r["v"][ksl, :]
        acc = acc * alpha + tl.dot_nn(p.astype(v.dtype), v)
        for term, ctx in zip(st.terms, ctxs):
            extra = term.values(r, t, ctx, p, dim)
            if extra is not None:
                acc = acc + extra
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


def dq_kernel(*refs, names, st: Static, n_out: int):
    r = named_refs(names, refs, st)
    dq_ref, grad_refs = refs[len(names)], refs[len(names) + 1:len(names) + n_out]
    bk = st.block_k
    all_rows = slice(None)
    qpos = col(r["qpos"], all_rows)
    q_pieces, loads = _load(st, r["q"], all_rows, qpos, r, 1)
    do, lse, delta = r["do"][...], col(r["lse"], all_rows), col(r["delta"], all_rows)

    def key_rows(j):
        return all_rows, _inner(st, j, bk)

    def step(j, carry, mask):
        dq, grads = carry
        ksl = key_rows(j)[1]
        k_pieces, _ = _load(st, r["k"], ksl, _key_col(st, r, ksl), r, -1)
        s, mask, factor, t, ctxs = _tile(st, r, all_rows, ksl, q_pieces, k_pieces, mask)
        p = jnp.exp(s - lse)
        if mask is not None:
            p = jnp.where(mask, p, 0.0)
        _, draw = _ds(st, r, t, ctxs, p, do, r["v"][ksl, :], delta, factor)
        dq = tuple(acc + tl.dot_nn(draw.astype(kp.dtype), kp) for acc, kp in zip(dq, k_pieces))
        for term, ctx in zip(st.terms, ctxs):
            dq = term.dq(r, t, ctx, draw, dq)
        return dq, _grad_step(st, "dq", r, t, ctxs, grads)

    # Term gradients live in loop carries and are written once at the end.
    init = (tuple(jnp.zeros(x.shape, F32) for x in q_pieces),
            _grad_init(st, "dq", r, qpos.shape[0]))
    dq, grads = _loop(st, r, r["k"].shape[0] // bk, key_rows, step, init,
                      refs[len(names) + n_out:])

    # Read here, not inside the pl.when bodies below (interpret mode resolves program ids
    # only at the kernel's top level).
    first_block = pl.program_id(2) == 0

    @_at_end(st)
    def _():
        _store_pieces(st, dq_ref, _unload(st, dq, loads))
        for ref, name in zip(grad_refs, st.grads("dq"), strict=True):
            if st.inputs[name] in SUMMED:
                _store_partial(st, ref, grads[name], first_block)
            else:  # per-query sums: this program's own rows
                store_col(ref, grads[name])


def _store_partial(st: Static, ref, value, first) -> None:
    """Write this program's parameter-gradient partial: its own block ('flat'), or, in the
    'tpu' layout, into the (batch, head) block shared by all query blocks: set by the first
    query block (`first`), added to by the others (see vjp._backward)."""
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
    grad_refs = refs[len(names) + 2:len(names) + n_out]  # per-key sums (FoX's ck)
    bq = st.block_q
    all_rows = slice(None)
    k_pieces, loads = _load(st, r["k"], all_rows, _key_col(st, r, all_rows), r, -1)
    v = r["v"][...]

    def query_rows(i):
        return _inner(st, i, bq), all_rows

    def step(i, carry, mask):
        dk, dv, grads = carry
        qsl = query_rows(i)[0]
        q_pieces, _ = _load(st, r["q"], qsl, col(r["qpos"], qsl), r, 1)
        s, mask, factor, t, ctxs = _tile(st, r, qsl, all_rows, q_pieces, k_pieces, mask)
        p = jnp.exp(s - col(r["lse"], qsl))
        if mask is not None:
            p = jnp.where(mask, p, 0.0)
        do = r["do"][qsl, :]
        dv = dv + tl.dot_tn(p.astype(do.dtype), do)
        _, draw = _ds(st, r, t, ctxs, p, do, v, col(r["delta"], qsl), factor)
        dk = tuple(acc + tl.dot_tn(draw.astype(qp.dtype), qp) for acc, qp in zip(dk, q_pieces))
        for term, ctx in zip(st.terms, ctxs):
            dk = term.dk(r, t, ctx, draw, dk)
        return dk, dv, _grad_step(st, "dkv", r, t, ctxs, grads)

    init = (tuple(jnp.zeros(x.shape, F32) for x in k_pieces), jnp.zeros(v.shape, F32),
            _grad_init(st, "dkv", r, v.shape[0]))
    dk, dv, grads = _loop(st, r, r["q"].shape[0] // bq, query_rows, step, init,
                          refs[len(names) + n_out:], q_blocked=False)

    @_at_end(st)
    def _():
        _store_pieces(st, dk_ref, _unload(st, dk, loads))
        dv_ref[...] = dv.astype(dv_ref.dtype)
        for ref, name in zip(grad_refs, st.grads("dkv"), strict=True):
            ref[...] = jnp.broadcast_to(grads[name], ref.shape)
