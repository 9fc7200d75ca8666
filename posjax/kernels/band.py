"""The band of a local (sliding-window) layer in the kernels: which blocks of the other sequence
each program walks, so a local layer costs O(L x window) in the kernels too.

The same band as the chunked path (posjax.tiling.banded): query block i reaches the key
blocks that hold array indices [i*bq - back, i*bq + bq - 1 + forward] (`banded.reach`), which
contains every key it may attend when positions grow by at least 1 per token within each
example. The forward and dq passes (one program per query block) walk those key blocks; the
dkv pass (one program per key block) walks the query blocks whose band holds it, the same
(query block, key block) pairs seen from the other side. Whether the band holds every
attendable pair is a property of the data, checked as the chunked path does (`exact`), and
dispatch.py chooses per call (Static.band):

  'off'      every block (a global layer, or a band as wide as the sequence)
  'on'       only the band (the positions are the array indices: nothing to check)
  'checked'  the band when `exact` holds for the call's positions, else every block: each
             pass is a lax.cond between the two kernels (vjp._either), on the flag 'band_ok'

In the 'flat' layout the band is the fori_loop's bounds; in the 'tpu' layout (the other
sequence streamed on the 4th grid axis) that axis has `width` steps, step j reads block
lo + j (clamped into range: a repeated block index is not copied again) and steps past hi
leave the carries as they are (flash._loop).

Works on Python ints (tests, grid sizes) and on traced int32 scalars (program ids, index
maps): numerators are clamped at 0 first, so integer division needs no floor of negatives
(Mosaic's jnp floor division lowers through `sign`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from posjax.tiling import banded
from posjax.tiling.tiles import tile_mask

MODES = ("off", "on", "checked")


def sides(window: int, causal: bool, q_blocked: bool, block_q: int, block_k: int):
    """(own block, other block, reach before, reach after) of a pass: q_blocked (forward, dq)
    walks key blocks, reaching `back` before and `forward` after its queries; the dkv pass
    walks query blocks, whose reach from a key is the mirror image."""
    back, forward = banded.reach(window, causal)
    if q_blocked:
        return block_q, block_k, back, forward
    return block_k, block_q, forward, back


def block_range(i, own: int, other: int, n_other: int, before: int, after: int):
    """[lo, hi) of the other side's blocks that own block i reaches (hi <= lo: none)."""
    start = i * own
    if isinstance(i, (int, np.integer)):
        return max(start - before, 0) // other, min((start + own - 1 + after) // other + 1,
                                                     n_other)
    lo = lax.div(jnp.maximum(start - before, 0), other)
    return lo, jnp.minimum(lax.div(start + own - 1 + after, other) + 1, n_other)


def width(n_own: int, own: int, other: int, n_other: int, before: int, after: int) -> int:
    """The most blocks any own block walks (>= 1: the streamed axis needs a step to start and
    end each program on)."""
    spans = [max(hi - lo, 0) for lo, hi in
             (block_range(i, own, other, n_other, before, after) for i in range(n_own))]
    return max(spans + [1])


def useful(window: int, causal: bool, bq: int, bk: int, nq: int, nk: int) -> bool:
    """Whether the band leaves out a key block of some query block."""
    own, other, before, after = sides(window, causal, True, bq, bk)
    return width(nq, own, other, nk, before, after) < nk


def key_blocks(window: int, causal: bool, bq: int, bk: int, nq: int, nk: int) -> np.ndarray:
    """[nq, width] key blocks each query block walks, padded with -1 (banded.gather's layout;
    banded.band is the rectangular superset [first, first + width) of these)."""
    own, other, before, after = sides(window, causal, True, bq, bk)
    ranges = [block_range(i, own, other, nk, before, after) for i in range(nq)]
    idx = np.full((nq, width(nq, own, other, nk, before, after)), -1)
    for i, (lo, hi) in enumerate(ranges):
        idx[i, :max(hi - lo, 0)] = np.arange(lo, max(hi, lo))
    return idx


def exact(q_pos, k_pos, kv_mask, segment_ids, causal: bool, window: int, bq: int,
          bk: int) -> jax.Array:
    """True (scalar) when the band misses no attendable pair of these inputs (unpadded
    [B, L] arrays; kv_mask None = all real): banded.covers_all_pairs on the kernels' blocks
    and band (`key_blocks`)."""
    batch, len_q = q_pos.shape
    len_k = k_pos.shape[1]
    nq, nk = -(-len_q // bq), -(-len_k // bk)
    q_seg, k_seg = segment_ids if segment_ids is not None else (None, None)
    real = jnp.ones((batch, len_k), jnp.bool_) if kv_mask is None else kv_mask.astype(jnp.bool_)

    def blocks(x, n, size):
        if x is None:
            return None
        x = jnp.pad(x, [(0, 0), (0, n * size - x.shape[1])])
        return jnp.moveaxis(x.reshape(batch, n, size), 1, 0)

    q_blocks = (None, blocks(q_pos, nq, bq), blocks(q_seg, nq, bq), None)
    k_pos_blocks = blocks(k_pos, nk, bk)
    # banded.gather's tuple (k, v, k_pos, kv_mask, k_seg, k_tok); k only for its block count
    k_blocks = (k_pos_blocks, None, k_pos_blocks, blocks(real, nk, bk), blocks(k_seg, nk, bk),
                None)
    idx = key_blocks(window, causal, bq, bk, nq, nk)

    def mask_of(qp, qs, kp, km, ks):
        return tile_mask(qp, kp, km, qs, ks, causal, window)

    return banded.covers_all_pairs(banded.gather(k_blocks, idx), q_blocks, mask_of, len_q,
                                   q_pos, q_seg, k_pos, k_seg, kv_mask, window, causal)
