"""The reference implementation: materializes [B, H, Lq, Lk] float32 logits. It is the
readable definition of every hook, mask and scale; the chunked path and the kernels are tested
against it. `softmax_rows` is its part after the whole-array hooks: the rows path (rows.py)
runs it on query blocks, so the two share one definition."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from posjax.attention import counts
from posjax.tiling import sides
from posjax.tiling.tiles import (MASK_VALUE, combine_values, count_factor, count_keys, prepare,
                                    rotate, rotate_values, scales_by_count, tile_logits,
                                    tile_mask)


def reference_attention(q, k, v, *, scheme, params, q_pos, k_pos, kv_mask, segment_ids, causal,
                        logn_length, window=None, sinks=None):
    """Materialize [B, H, Lq, Lk] logits: the readable definition the other paths must match.

    sinks: [H] learned sink logits (gpt-oss): each joins its head's softmax denominator as
    one extra key with no value, so a query may give part of its attention to nothing."""
    q_seg, k_seg = segment_ids if segment_ids is not None else (None, None)
    q_tok, k_tok = prepare(scheme, params, q, k, v, q_pos, k_pos)
    q, k = rotate(scheme, params, q, k, q_pos, k_pos)
    v = rotate_values(scheme, params, v, k_pos, k_pos)
    k_tok = sides.carried_keys(scheme, params, k, k_tok)  # PaTH: the key rows' UT chunks
    return softmax_rows(scheme, params, (q, q_pos, q_seg, q_tok), (k, v, k_pos, kv_mask, k_seg,
                        k_tok), k_pos, causal=causal, logn_length=logn_length, window=window,
                        sinks=sinks)


def softmax_rows(scheme, params, queries, keys, all_k_pos, *, causal, logn_length, window=None,
                 sinks=None, heads_major=None):
    """Attention of `queries` (q, q_pos, q_seg, q_tok) over all of `keys` (k, v, k_pos,
    kv_mask, k_seg, k_tok) after prepare / rotate / rotate_values (and `carried_keys` of these
    key rows): logits, masks, softmax, values, the inverse value rotation (by `all_k_pos`, the
    whole key positions), cast to q's dtype. heads_major: (k, v) as [B, H, Lk, D] when the
    caller holds them so (tiles.py)."""
    q, q_pos, q_seg, q_tok = queries
    k, v, k_pos, kv_mask, k_seg, k_tok = keys
    k_major, v_major = (None, None) if heads_major is None else heads_major
    mask = tile_mask(q_pos, k_pos, kv_mask, q_seg, k_seg, causal, window)
    raw = None
    if scheme.carried_scores is not None:  # PaTH: scores carried outward, one call per side
        raw = sides.carried_rows(scheme, params, q, k, q_tok, k_tok, mask, q_pos, k_pos, causal)
    logits = tile_logits(scheme, params, q, k, q_pos, k_pos, q_tok, k_tok, k_major=k_major,
                         raw=raw)
    if scheme.count_gates is not None:  # CoPE: gated key counts over whole rows
        logits = counts.whole_row(scheme, params, q, logits, mask, q_pos, k_pos)
    if scales_by_count(scheme, logn_length):  # log-n and the scheme's length_scale (SSMax)
        n_keys = count_keys(mask, logits.shape)
        logits = logits * count_factor(scheme, params, n_keys, logn_length)[..., None]
    if scheme.normalize is not None:  # replaces softmax (stick-breaking): whole rows per side
        p = _normalized_rows(scheme, params, logits, mask, q_pos, k_pos, causal)
        out = combine_values(scheme, params, p, v, q_pos, k_pos, v_major=v_major)
        return rotate_values(scheme, params, out, q_pos, all_k_pos, inverse=True).astype(q.dtype)
    if mask is not None:
        logits = jnp.where(mask, logits, MASK_VALUE)
    # The max only stabilizes exp; softmax does not depend on it, so no gradient through it.
    m = logits.max(-1, keepdims=True)
    if sinks is not None:
        sink = sinks.astype(jnp.float32)[None, :, None, None]
        m = jnp.maximum(m, sink)
    m = jax.lax.stop_gradient(m)
    p = jnp.exp(logits - m)
    if mask is not None:
        p = jnp.where(mask, p, 0.0)  # a fully masked row: all zeros instead of uniform
    total = p.sum(-1, keepdims=True)
    if sinks is not None:
        total = total + jnp.exp(sink - m)  # > 0: a row with no key gives output 0
    total = jnp.where(total > 0, total, 1.0)
    if scheme.content_values is None:
        # p @ v is linear in p: divide the [q, D] output instead of the [q, Lk] probabilities,
        # one full pass over the logits fewer (measured ~5% of rows' time at 8192 tokens).
        out = combine_values(scheme, params, p, v, q_pos, k_pos, v_major=v_major)
        out = out / jnp.swapaxes(total, 1, 2)
    else:  # the hook reads the probabilities themselves
        out = combine_values(scheme, params, p / total, v, q_pos, k_pos, v_major=v_major)
    return rotate_values(scheme, params, out, q_pos, all_k_pos, inverse=True).astype(q.dtype)


def _normalized_rows(scheme, params, logits, mask, q_pos, k_pos, causal):
    """The scheme's `normalize` weights [B, H, q, k] of whole rows: its sides' weights added."""
    runs = sides.sides(causal)
    carry = jnp.zeros(logits.shape[:3], jnp.float32)
    total = 0.0
    for before in runs:
        own = sides.side_mask(mask, q_pos, k_pos, before)
        weights, _ = sides.normalize_tile(scheme, params, logits, own, carry, q_pos, k_pos,
                                          before, len(runs))
        total = total + weights
    return total
