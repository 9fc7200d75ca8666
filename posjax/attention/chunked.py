"""Chunked attention: query blocks x key blocks with an online softmax, in plain JAX/XLA.

Never builds a [Lq, Lk] array: the largest intermediates are one [B, H, block_q, block_k]
tile and O(L) arrays (q, k, v, positions, the output). Works on every backend, so it is both
the long-context path on CPU and the fallback where no Pallas kernel exists.

Backward: JAX differentiates the two nested scans, with `jax.checkpoint` on
  * the per-(query block, key block) step: the backward keeps only the scan carries
    (running max, sum, accumulator: O(block_q * D) per key block), recomputing each tile;
  * the per-query-block body: the outer scan keeps only its inputs, so while one query block
    is differentiated the inner carries of the others do not exist.
Peak backward memory is O(Lk/block_k * block_q * H * D + block_q * block_k * H), i.e. O(L x
block), with no hand-written vjp per hook: the gradients of every hook (bias params,
content_logits/values tables, scores, rotate) come from JAX itself, so a new scheme is correct
in the chunked backward as soon as it is correct in the reference. The price is about one extra
forward's worth of recompute compared with a hand-written flash backward; the Pallas kernel
(posjax.kernels) is the place for that speed.

Local layers (window): a tile with no attendable pair is skipped (lax.cond), and each query
block walks only the band of key blocks its window reaches by array index (banded.py), when
a check on the data (exact count of attendable keys per query) shows the band misses no pair;
otherwise every key block, as for a global layer. So a local layer costs O(L x window) for
ordered positions, packed or not, and gives the reference's numbers for any positions.

Learned attention sinks: the running max starts at the head's sink and the running sum at 1
(the sink's own term), so the sink sits in every row's denominator.

A scheme whose `carried_scores` replace q.k (PaTH): per side of the query, a scan over the
key blocks from the query's block outward carries each query's [B, bq, H, D] state (for PaTH,
the query transported through the keys passed), with one online softmax across both sides.
Its `carried_keys` (PaTH's per-chunk UT transforms) runs once on each key block before the
loop over query blocks, so every query block reads it.

A scheme whose `normalize` hook replaces softmax (stick-breaking): no online softmax. Per side
of the query (the keys before it; bidirectional, also those after), a scan over the key
blocks from the query's block outward (reversed for the side before) carries each query's
[B, H, bq] state (the log of the stick left) and the output, so memory stays O(L x block).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from posjax.attention import counts
from posjax.tiling import banded, sides
from posjax.tiling.tiles import (MASK_VALUE, combine_values, count_factor, count_keys, prepare,
                                    rotate, rotate_values, scales_by_count, tile_logits,
                                    tile_mask)


def chunked_attention(q, k, v, *, scheme, params, q_pos, k_pos, kv_mask, segment_ids, causal,
                      logn_length, block_q: int, block_k: int, window=None, sinks=None):
    """Same contract and numbers as reference_attention, O(L x block) memory; a local layer
    (window) O(L x window) time when its positions allow the band (banded.py)."""
    q_seg, k_seg = segment_ids if segment_ids is not None else (None, None)
    q_tok, k_tok = prepare(scheme, params, q, k, v, q_pos, k_pos)  # per token: O(L)
    q, k = rotate(scheme, params, q, k, q_pos, k_pos)  # whole arrays: O(L)
    v = rotate_values(scheme, params, v, k_pos, k_pos)
    batch, len_q, heads, dim = q.shape
    len_k = k.shape[1]
    # A block longer than the sequence would only add padding.
    bq, bk = min(block_q, len_q), min(block_k, len_k)
    nq, nk = -(-len_q // bq), -(-len_k // bk)

    # Pad to whole blocks. Padded keys are masked through kv_mask; padded query rows are
    # computed (position 0, harmless for any hook) and sliced off at the end.
    pad_k = nk * bk - len_k
    band = None if window is None else banded.band(window, causal, bq, bk, nq, nk)
    if (pad_k or band is not None) and kv_mask is None:
        kv_mask = jnp.ones((batch, len_k), jnp.bool_)
    q_blocks = blocks_of((q, q_pos, q_seg, q_tok), nq, bq)
    k_blocks = blocks_of((k, v, k_pos, kv_mask, k_seg, k_tok), nk, bk)
    if scheme.carried_keys is not None:  # PaTH: each key block's UT chunks, once per block
        k_tok = jax.vmap(functools.partial(sides.carried_keys, scheme, params))(
            k_blocks[0], k_blocks[5])
        k_blocks = k_blocks[:5] + (k_tok,)
    tile_shape = (batch, 1, bq, bk)

    def mask_of(qp, qs, kp, km, ks):
        return tile_mask(qp, kp, km, qs, ks, causal, window)

    counting = scheme.count_gates is not None  # CoPE: gated key counts (counts.py)

    def key_step(q_tile, factor, mass, carry, k_tile):
        # One (query block, key block) tile of the online softmax.
        qt, qp, qs, qa = q_tile
        kt, vt, kp, km, ks, ka = k_tile
        mask = mask_of(qp, qs, kp, km, ks)

        def update(carry):
            m_prev, l_prev, acc_prev = carry[:3]
            s = tile_logits(scheme, params, qt, kt, qp, kp, qa, ka)  # [B, H, bq, bk] float32
            if counting:  # carry[3]: each query's gate mass over the earlier key blocks
                g = counts.gates(scheme, params, s, mask)
                s = counts.add_count_logits(scheme, params, qt, s, g, qp, kp, carry[3], *mass)
            if factor is not None:
                s = s * factor
            if mask is not None:
                s = jnp.where(mask, s, MASK_VALUE)
            # The running max only stabilizes exp; the result does not depend on it.
            m = jax.lax.stop_gradient(jnp.maximum(m_prev, s.max(-1)))  # [B, H, bq]
            alpha = jnp.exp(m_prev - m)  # rescales what was accumulated under the old max
            p = jnp.exp(s - m[..., None])
            if mask is not None:
                p = jnp.where(mask, p, 0.0)
            l = l_prev * alpha + p.sum(-1)
            # p @ v and content_values are linear in p: one accumulator, one rescale.
            acc = acc_prev * _to_bqh(alpha) + combine_values(scheme, params, p, vt, qp, kp)
            return (m, l, acc, carry[3] + g.sum(-1)) if counting else (m, l, acc)

        if mask is None:
            return update(carry), None
        # A tile with no attendable pair (the future half of a causal pass, key padding, other
        # segments, keys outside a local layer's window) leaves the carry exactly as it is
        # (p = 0, max unchanged): skip its work, forward and backward, instead of computing
        # and masking it.
        return jax.lax.cond(jnp.any(mask), update, lambda c: c, carry), None

    def query_block(q_tile, k_tiles):
        """One query block against the stacked key tiles [n, ...] (all, or its band)."""
        qt, qp, qs, qa = q_tile
        factor = mass = None
        if scales_by_count(scheme, logn_length):
            # Pre-pass: how many keys each query may attend (integer work, no gradients),
            # O(bq * bk) memory per step instead of a [Lq, Lk] mask.
            def count(n, k_tile):
                _, _, kp, km, ks, _ = k_tile
                return n + count_keys(mask_of(qp, qs, kp, km, ks), tile_shape), None

            n_keys, _ = jax.lax.scan(count, jnp.zeros((batch, 1, bq), jnp.int32), k_tiles)
            factor = count_factor(scheme, params, n_keys, logn_length)[..., None]
        rows = jnp.zeros((batch, heads, bq), jnp.float32)
        if scheme.normalize is not None:
            return normalized_block(q_tile, k_tiles, factor, rows)
        if counting:
            # Pre-pass: each query's gate mass at-or-before and strictly before it (the counts
            # of the main pass need both before its first key block), O(bq * bk) per step.
            def add_mass(total, k_tile):
                kt, _, kp, km, ks, ka = k_tile
                s = tile_logits(scheme, params, qt, kt, qp, kp, qa, ka)
                g = counts.gates(scheme, params, s, mask_of(qp, qs, kp, km, ks))
                return jax.tree.map(jnp.add, total, counts.totals(g, qp, kp)), None

            mass, _ = jax.lax.scan(jax.checkpoint(add_mass, prevent_cse=False), (rows, rows),
                                   k_tiles)
        if sinks is None:
            m0, l0 = jnp.full((batch, heads, bq), MASK_VALUE, jnp.float32), rows
        else:
            # The sink is one more logit in every row's softmax, with no value: start the
            # running max at it and the running sum at its exp(sink - max) = 1 (written so
            # that the sink's gradient flows through l).
            sink = jnp.broadcast_to(sinks.astype(jnp.float32)[None, :, None], rows.shape)
            m0 = jax.lax.stop_gradient(sink)
            l0 = jnp.exp(sink - m0)
        init = (m0, l0, jnp.zeros((batch, bq, heads, dim), jnp.float32))
        init += (rows,) if counting else ()
        if scheme.carried_scores is not None:
            return carried_block(q_tile, k_tiles, factor, init)
        step = jax.checkpoint(functools.partial(key_step, q_tile, factor, mass),
                              prevent_cse=False)
        (_, l, acc, *_), _ = jax.lax.scan(step, init, k_tiles)
        # No attendable key (and no sink): l == 0 and acc == 0, so the row stays 0 (never 0/0).
        out = acc / _to_bqh(jnp.where(l > 0, l, 1.0))
        return rotate_values(scheme, params, out, qp, k_pos, inverse=True).astype(q.dtype)

    runs = sides.sides(causal)

    def side_step(q_tile, factor, before, carry, k_tile):
        # One tile of one side of a scheme whose `normalize` replaces softmax; carry: each
        # query's state from this side's nearer key blocks and the output so far.
        qt, qp, qs, qa = q_tile
        kt, vt, kp, km, ks, ka = k_tile
        mask = sides.side_mask(mask_of(qp, qs, kp, km, ks), qp, kp, before)

        def update(carry):
            state, acc = carry
            s = tile_logits(scheme, params, qt, kt, qp, kp, qa, ka)
            if factor is not None:
                s = s * factor
            w, state = sides.normalize_tile(scheme, params, s, mask, state, qp, kp, before,
                                            len(runs))
            return state, acc + combine_values(scheme, params, w, vt, qp, kp)

        # A tile with no pair on this side (the other side's blocks) leaves the carry as is.
        return jax.lax.cond(jnp.any(mask), update, lambda c: c, carry), None

    def normalized_block(q_tile, k_tiles, factor, rows):
        """One query block of a `normalize` scheme: per side, a scan over the key blocks from
        the query's block outward (downward for the side before), carrying [B, H, bq] state
        and the [B, bq, H, D] output; the weights are final, so nothing is divided at the
        end."""
        acc = jnp.zeros((batch, bq, heads, dim), jnp.float32)
        for before in runs:
            step = jax.checkpoint(functools.partial(side_step, q_tile, factor, before),
                                  prevent_cse=False)
            (_, acc), _ = jax.lax.scan(step, (rows, acc), k_tiles, reverse=before)
        return rotate_values(scheme, params, acc, q_tile[1], k_pos, inverse=True).astype(q.dtype)

    def carried_step(q_tile, factor, before, carry, k_tile):
        # One tile of one side of a scheme whose `carried_scores` replace q.k (PaTH): carry
        # is (each query's state from this side's nearer key blocks, the online softmax).
        qt, qp, qs, qa = q_tile
        kt, vt, kp, km, ks, ka = k_tile
        mask = sides.side_mask(mask_of(qp, qs, kp, km, ks), qp, kp, before, shared=False)

        def update(carry):
            state, (m_prev, l_prev, acc_prev) = carry
            raw, state = scheme.carried_scores(params, state, kt, qa, ka, mask, qp, kp, before)
            s = tile_logits(scheme, params, qt, kt, qp, kp, qa, ka, raw=raw)
            if factor is not None:
                s = s * factor
            s = jnp.where(mask, s, MASK_VALUE)
            m = jax.lax.stop_gradient(jnp.maximum(m_prev, s.max(-1)))
            alpha = jnp.exp(m_prev - m)
            p = jnp.where(mask, jnp.exp(s - m[..., None]), 0.0)
            acc = acc_prev * _to_bqh(alpha) + combine_values(scheme, params, p, vt, qp, kp)
            return state, (m, l_prev * alpha + p.sum(-1), acc)

        # A tile with no pair on this side transforms nothing for these queries: skip it.
        return jax.lax.cond(jnp.any(mask), update, lambda c: c, carry), None

    def carried_block(q_tile, k_tiles, factor, init):
        """One query block of a `carried_scores` scheme: per side, a scan over the key blocks
        from the query's block outward (downward for the side before) carrying the queries'
        [B, bq, H, D] state, which starts at q on each side, and one online softmax across
        both sides."""
        soft = init
        for before in runs:
            step = jax.checkpoint(functools.partial(carried_step, q_tile, factor, before),
                                  prevent_cse=False)
            state = q_tile[0].astype(jnp.float32)
            (_, soft), _ = jax.lax.scan(step, (state, soft), k_tiles, reverse=before)
        _, l, acc = soft
        out = acc / _to_bqh(jnp.where(l > 0, l, 1.0))
        return rotate_values(scheme, params, out, q_tile[1], k_pos, inverse=True).astype(q.dtype)

    def every_key_block():
        return jax.lax.map(jax.checkpoint(lambda qb: query_block(qb, k_blocks),
                                          prevent_cse=False), q_blocks)

    if band is None:
        out = every_key_block()
    else:
        # A local layer: each query block walks only the key blocks its window can reach
        # when positions grow with the array index (banded.py), O(L x window); positions
        # where that band would miss an attendable pair (shuffled, reused) take every key
        # block instead, so the result is the same for any positions.
        band_blocks = banded.gather(k_blocks, band)
        exact = banded.covers_all_pairs(
            band_blocks, q_blocks, mask_of, len_q, q_pos, q_seg, k_pos, k_seg, kv_mask,
            window, causal)
        out = jax.lax.cond(
            exact,
            lambda: jax.lax.map(jax.checkpoint(lambda a: query_block(*a), prevent_cse=False),
                                (q_blocks, band_blocks)),
            every_key_block)
    out = jnp.moveaxis(out, 0, 1).reshape(batch, nq * bq, heads, dim)
    return out[:, :len_q]


def blocks_of(arrays, n: int, size: int):
    """Pad each [B, L, ...] array (None passes through) to n*size and split it into
    [n, B, size, ...] so that lax.scan walks the blocks (stacked operands differentiate
    into stacked cotangents, not full-size scatter-adds per step)."""

    def split(x):
        if x is None:
            return None
        pad = n * size - x.shape[1]
        if pad:
            x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
        return jnp.moveaxis(x.reshape(x.shape[0], n, size, *x.shape[2:]), 1, 0)

    return tuple(split(x) for x in arrays)


def _to_bqh(x):
    """[B, H, q] row statistics -> [B, q, H, 1] to scale [B, q, H, D] accumulators."""
    return jnp.swapaxes(x, 1, 2)[..., None]
