"""Rows: query blocks against whole rows of keys, the reference's math one query block at a
time. The CPU path for long inputs.

Each step of a loop over query blocks runs reference.softmax_rows on [B, H, block_q, Lk]
logits: one plain softmax per row (no online rescaling, no per-key-block loop), two large
products per step, and the same definition as the reference, hooks, masks, CoPE counts,
log-n and sinks included. Memory is one step's logits (at most BLOCK_ELEMENTS) per step,
linear in the length, forward and backward (`jax.checkpoint` per step: the backward
recomputes a block's logits instead of keeping them). On XLA:CPU a step's working set stays
in cache where the reference's [B, H, L, L] arrays stream through memory, and the one loop
level costs less than chunked's two nested scans with an online softmax
(bench/long_attention_peer.md has the measurements).

Keys and values are transposed once per call to [B, H, Lk, D] (heads-major), so the two
products of every step are plain batched matmuls; the hooks still see [B, L, H, D].

Bidirectional attention with no position term in the logits, or with a factored one
(`content_factors`: Transformer-XL; any mask or window, float32) runs as the compiled CPU
kernel of native.py where it is built: the same numbers, faster. A factored term goes in as
plain attention of [q' | q_extra] over [k | k_extra] (a key dim of D + F, values of D; the
kernel reads the factors where they are, no concatenated copies), its gradients back to the
scheme's params by autodiff through the hook.

Local layers (window): each query block attends only the key blocks its window reaches by
array index (banded.py: the band, and the check on the data that it misses no attendable
pair; every key when it would), so a local layer costs O(L x window).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from posjax.attention import native
from posjax.attention.chunked import blocks_of
from posjax.attention.reference import softmax_rows
from posjax.tiling import banded, sides
from posjax.tiling.tiles import prepare, rotate, rotate_values, tile_mask

# One step's [B, H, block_q, Lk] float32 logits stay under this many elements (24 MiB). On the
# 2-core EPYC of bench/long_attention_peer.md, with 6 heads: block_q 128 was fastest at 8192
# keys (256, at twice this size, took twice as long), and at 16384 keys 64 took 0.60x the CPU
# time of 128.
BLOCK_ELEMENTS = 6 * 128 * 8192
MIN_BLOCK_Q = 16
# From this many keys on, a global layer's query block is sized to fill BLOCK_ELEMENTS: on the
# 2-core Xeon of the same file, fewer and larger steps took 0.72x (2048 keys, block 512) and
# 0.84x (4096, block 256) of block 128's wall time, on EPYC block 64-256 measured the same at
# 2048. Shorter rows keep block_q: their whole logits are small anyway.
FILL_FROM_KEYS = 1024


def query_block(block_q: int, batch: int, heads: int, len_q: int, len_k: int,
                fill: bool = False) -> int:
    """The query block rows runs. fill (a global layer) and len_k >= FILL_FROM_KEYS: the
    largest block_q * 2**n (n may be negative) whose step logits fit BLOCK_ELEMENTS, then
    evened out over the blocks it takes (a multiple of 8, less padding). Otherwise block_q,
    halved while a step's logits exceed BLOCK_ELEMENTS. Never below MIN_BLOCK_Q, never more
    than len_q."""
    def fits(bq):
        return batch * heads * bq * len_k <= BLOCK_ELEMENTS

    bq = min(block_q, len_q)
    if fill and len_k >= FILL_FROM_KEYS:
        while bq < len_q and fits(2 * bq):
            bq *= 2
    while bq > MIN_BLOCK_Q and not fits(bq):
        bq //= 2
    if fill and len_k >= FILL_FROM_KEYS and bq < len_q:
        blocks = _ceil_div(len_q, bq)
        bq = min(bq, 8 * _ceil_div(_ceil_div(len_q, blocks), 8))
    return min(bq, len_q)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def rows_attention(q, k, v, *, scheme, params, q_pos, k_pos, kv_mask, segment_ids, causal,
                   logn_length, block_q: int, block_k: int, window=None, sinks=None):
    """Same contract and numbers as reference_attention, O(block_q x Lk) memory per step
    (the block: `query_block`); block_k is the granularity of a local
    layer's band."""
    q_seg, k_seg = segment_ids if segment_ids is not None else (None, None)
    q_tok, k_tok = prepare(scheme, params, q, k, v, q_pos, k_pos)  # per token: O(L)
    q, k = rotate(scheme, params, q, k, q_pos, k_pos)
    v = rotate_values(scheme, params, v, k_pos, k_pos)
    batch, len_q, heads, dim = q.shape
    len_k = k.shape[1]
    key_dim = native.key_dim(scheme, params, q, k, q_pos, k_pos)
    if native.usable(scheme, q, causal=causal, logn_length=logn_length, sinks=sinks,
                     key_dim=key_dim):
        factors = {}
        if scheme.content_factors is not None:  # raw = [q' | q_extra] . [k | k_extra]
            q_content, q_extra, k_extra = scheme.content_factors(params, q, k, q_pos, k_pos)
            factors = dict(q_extra=q_extra, k_extra=k_extra)
        else:
            q_content = q
        out = native.attention(q_content, k, v, scale=scheme.logit_scale(dim), q_pos=q_pos,
                               k_pos=k_pos, window=window, kv_mask=kv_mask,
                               segment_ids=segment_ids, **factors)
        out = rotate_values(scheme, params, out, q_pos, k_pos, inverse=True)
        return out.astype(q.dtype)
    bq = query_block(block_q, batch, heads, len_q, len_k, fill=window is None)
    nq = -(-len_q // bq)
    q_blocks = blocks_of((q, q_pos, q_seg, q_tok), nq, bq)
    rows = dict(causal=causal, logn_length=logn_length, window=window, sinks=sinks)

    def whole_rows():
        # PaTH: the key rows' UT chunks, once for every query block
        keys = (k, v, k_pos, kv_mask, k_seg, sides.carried_keys(scheme, params, k, k_tok))
        major = (jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2))

        def step(queries):
            return softmax_rows(scheme, params, queries, keys, k_pos, heads_major=major, **rows)

        return jax.lax.map(jax.checkpoint(step, prevent_cse=False), q_blocks)

    band = None
    if window is not None:
        bk = min(block_k, len_k)
        nk = -(-len_k // bk)
        band = banded.band(window, causal, bq, bk, nq, nk)
    if band is None:
        out = whole_rows()
    else:
        # A local layer: per query block the band of key blocks, flattened into one row of
        # width * bk keys (out-of-range blocks masked), when the check shows it is exact.
        mask = jnp.ones((batch, len_k), jnp.bool_) if kv_mask is None else kv_mask
        k_blocks = blocks_of((k, v, k_pos, mask, k_seg, k_tok), nk, bk)
        band_blocks = banded.gather(k_blocks, band)

        def mask_of(qp, qs, kp, km, ks):
            return tile_mask(qp, kp, km, qs, ks, causal, window)

        exact = banded.covers_all_pairs(band_blocks, q_blocks, mask_of, len_q, q_pos, q_seg,
                                        k_pos, k_seg, mask, window, causal)

        def banded_step(args):
            queries, key_blocks = args
            keys = tuple(banded.flatten(x) for x in key_blocks)
            # PaTH: the UT chunks of this query block's band, the tile it sees
            keys = keys[:5] + (sides.carried_keys(scheme, params, keys[0], keys[5]),)
            return softmax_rows(scheme, params, queries, keys, k_pos, **rows)

        out = jax.lax.cond(
            exact,
            lambda: jax.lax.map(jax.checkpoint(banded_step, prevent_cse=False),
                                (q_blocks, band_blocks)),
            whole_rows)
    out = jnp.moveaxis(out, 0, 1).reshape(batch, nq * bq, heads, dim)
    return out[:, :len_q]
