"""The band of a local (sliding-window) layer in the chunked path: which key blocks each query
block can reach, and the exact check that no attendable pair lies outside them.

The window is a condition on POSITIONS (|q_pos - k_pos| <= window // 2; causal: 0 <= q_pos -
k_pos < window), not on array indices, so no key block can be ruled out from its index alone.
But in the usual case, positions that grow by at least 1 per token within each example
(packed or not), an attendable pair is also at most window // 2 (causal: window - 1) apart in
the array, so a query block needs only the few key blocks around it: O(L x window) work
instead of O(L^2) tiles, even skipped ones. `covers_all_pairs` checks that on the data, per
query: keys attendable inside the band (counted tile by tile) == keys attendable at all
(counted in O(L log L) by sorting the keys by (real, segment, position) and binary-searching
each query's window). chunked.py runs the band when they agree and every key block when they
do not (shuffled or repeated positions), so the answer never depends on the positions' order.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np


def reach(window: int, causal: bool) -> tuple[int, int]:
    """How far (back, forward) from the query a key may be, in positions (inclusive)."""
    return (window - 1, 0) if causal else (window // 2, window // 2)


def band(window: int, causal: bool, bq: int, bk: int, nq: int, nk: int) -> Optional[np.ndarray]:
    """[nq, width] key block indices each query block reaches by array index (those outside
    [0, nk) are padding, masked by `gather`); None when the band would hold every key block."""
    back, forward = reach(window, causal)
    starts = np.arange(nq) * bq
    first = (starts - back) // bk
    last = (starts + bq - 1 + forward) // bk
    width = int((last - first).max()) + 1
    if width >= nk:
        return None
    return first[:, None] + np.arange(width)[None, :]


def gather(k_blocks: tuple, idx: np.ndarray) -> tuple:
    """The key block arrays [nk, B, bk, ...] (k, v, k_pos, kv_mask, k_seg, k_tok) gathered to
    [nq, width, B, bk, ...]; out-of-range band entries get kv_mask False, so they hold no pair
    (and are skipped like any empty tile). kv_mask must not be None."""
    nk = k_blocks[0].shape[0]
    valid = jnp.asarray((idx >= 0) & (idx < nk))
    safe = jnp.asarray(np.clip(idx, 0, nk - 1))
    out = [None if x is None else x[safe] for x in k_blocks]
    out[3] = out[3] & valid[:, :, None, None]
    return tuple(out)


def flatten(x):
    """[width, B, bk, ...] -> [B, width * bk, ...] (None passes through)."""
    if x is None:
        return None
    x = jnp.moveaxis(x, 0, 1)
    return x.reshape(x.shape[0], x.shape[1] * x.shape[2], *x.shape[3:])


def covers_all_pairs(band_blocks, q_blocks, mask_of, len_q: int, q_pos, q_seg, k_pos, k_seg,
                     kv_mask, window: int, causal: bool) -> jax.Array:
    """True (scalar) when, for every real query, the band holds every key it may attend."""

    def in_band(args):
        (_, qp, qs, _), (_, _, kp, km, ks, _) = args
        mask = mask_of(qp, qs, flatten(kp), flatten(km), flatten(ks))  # [B, 1, bq, width * bk]
        return mask.sum(-1, dtype=jnp.int32)[:, 0]  # [B, bq]

    counts = jax.lax.map(in_band, (q_blocks, band_blocks))  # [nq, B, bq]
    counts = jnp.moveaxis(counts, 0, 1).reshape(q_pos.shape[0], -1)[:, :len_q]
    return jnp.all(counts == attendable_keys(q_pos, q_seg, k_pos, k_seg, kv_mask, window,
                                             causal))


def attendable_keys(q_pos, q_seg, k_pos, k_seg, kv_mask, window: int, causal: bool):
    """[B, Lq] int32: how many keys each query may attend (real, same segment, in the window),
    whatever the order of the positions, in O(L log L)."""
    back, forward = reach(window, causal)
    q_seg = jnp.zeros_like(q_pos) if q_seg is None else q_seg
    k_seg = jnp.zeros_like(k_pos) if k_seg is None else k_seg
    real = jnp.ones(k_pos.shape, jnp.bool_) if kv_mask is None else kv_mask

    def one_row(qp, qs, kp, ks, kr):
        # Keys sorted by (padding last, segment, position): a query's keys are one run.
        rank = (~kr).astype(jnp.int32)
        order = jnp.lexsort((kp, ks, rank))
        keys = (rank[order], ks[order], kp[order])
        zero = jnp.zeros_like(qp)
        below = _count(keys, (zero, qs, qp - back), inclusive=False)
        upto = _count(keys, (zero, qs, qp + forward), inclusive=True)
        return upto - below

    return jax.vmap(one_row)(q_pos.astype(jnp.int32), q_seg.astype(jnp.int32),
                             k_pos.astype(jnp.int32), k_seg.astype(jnp.int32), real)


def _less(a, b):
    """Lexicographic a < b for triples of arrays."""
    return (a[0] < b[0]) | ((a[0] == b[0]) & ((a[1] < b[1]) | ((a[1] == b[1]) & (a[2] < b[2]))))


def _count(keys, target, inclusive: bool):
    """Per target: how many of the sorted `keys` are < target (<= with inclusive)."""
    n = keys[0].shape[0]

    def step(_, bounds):
        lo, hi = bounds
        mid = (lo + hi) // 2
        at = tuple(x[jnp.minimum(mid, n - 1)] for x in keys)
        right = ~_less(target, at) if inclusive else _less(at, target)
        active = lo < hi
        return jnp.where(active & right, mid + 1, lo), jnp.where(active & ~right, mid, hi)

    lo = jnp.zeros(target[0].shape, jnp.int32)
    lo, _ = jax.lax.fori_loop(0, n.bit_length() + 1, step, (lo, jnp.full_like(lo, n)))
    return lo
