"""The tile math every attention path shares: the reference on whole arrays, chunked on
(query block, key block) tiles, and the Pallas kernels (posjax.kernels), which take the mask
value and the log-n key count from here instead of keeping their own copies.

Imports nothing from posjax above `positions/`.
"""

from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp

from posjax.positions.base import Scheme
from posjax.tiling import mixed

# Masked logits are set to this FINITE value instead of -inf: with -inf a fully masked row
# computes exp(-inf - -inf) = NaN, and NaN leaks into gradients even through `where`.
MASK_VALUE = -1e30


def rotate(scheme: Scheme, params, q, k, q_pos, k_pos):
    """Apply the rotate hook to whole q, k (elementwise in position: O(L) memory).

    A scheme with `scores` gets q, k unrotated (its scores hook does its own rotations).
    """
    if scheme.rotate is not None and scheme.scores is None:
        q, k = scheme.rotate(params, q, k, q_pos, k_pos)
    return q, k


def rotate_values(scheme: Scheme, params, x, pos, k_pos, inverse: bool = False):
    """The value-path rotation (RoPE on_values=True): v by the key positions, or with
    inverse=True the output [B, Lq, H, D] back by the query positions; x unchanged for
    schemes without the hook. Elementwise in positions: whole arrays or query blocks."""
    if scheme.rotate_values is None:
        return x
    return scheme.rotate_values(params, x, pos, k_pos, inverse)


def prepare(scheme: Scheme, params, q, k, v, q_pos, k_pos):
    """The scheme's per-token arrays (q_tok, k_tok) from whole q, k, v, computed once per
    forward (FoX's forget-gate sums); (None, None) for schemes without the hook."""
    if scheme.prepare is None:
        return None, None
    return scheme.prepare(params, q, k, v, q_pos, k_pos)


def factored_raw(scheme: Scheme, params, q, k, q_pos, k_pos, k_major=None) -> jax.Array:
    """Raw logits [B, H, q, k] float32 of a scheme with `content_factors`: q'.k (k_major:
    k as [B, H, k, D], see tile_logits) + q_extra.k_extra, each product accumulated in float32
    (a k_extra shared over heads is multiplied as [B, k, F], not broadcast)."""
    q_content, q_extra, k_extra = scheme.content_factors(params, q, k, q_pos, k_pos)
    if k_major is not None:
        raw = mixed.einsum("bhqd,bhkd->bhqk", jnp.swapaxes(q_content, 1, 2), k_major)
    else:
        raw = mixed.einsum("bqhd,bkhd->bhqk", q_content, k)
    if k_extra.shape[2] == 1:
        return raw + mixed.einsum("bqhf,bkf->bhqk", q_extra, k_extra[:, :, 0])
    return raw + mixed.einsum("bqhf,bkhf->bhqk", q_extra, k_extra)


def tile_logits(scheme: Scheme, params, q, k, q_pos, k_pos, q_tok=None, k_tok=None,
                k_major=None, raw=None) -> jax.Array:
    """Scaled logits [B, H, q, k] float32 of a (query tile, key tile), before log-n and masks:
    raw * logit_scale + bias + token_bias, then the scheme's `map_logits` of all heads at once
    (DAPE), so that every mask the caller applies comes after that map.
    q_tok / k_tok: the tile's rows of the prepared per-token arrays (see `prepare`).
    k_major: the same keys as [B, H, k, D] (heads-major), when the caller holds them so: q.k
    reads them, which saves XLA:CPU a transpose of the keys per tile (the hooks get k).
    raw: the tile's raw scores [B, H, q, k] when the caller made them (`carried_scores`),
    in place of q.k or `scores`. A scheme with `content_factors` replaces q.k by its factored
    raw logits (`factored_raw`)."""
    if raw is not None:
        raw = raw.astype(jnp.float32)
    elif scheme.scores is not None:
        raw = scheme.scores(params, q, k, q_pos, k_pos).astype(jnp.float32)
    elif scheme.content_factors is not None:
        raw = factored_raw(scheme, params, q, k, q_pos, k_pos, k_major)
    elif k_major is not None:
        raw = mixed.einsum("bhqd,bhkd->bhqk", jnp.swapaxes(q, 1, 2), k_major)
    else:
        # q.k in the input dtype, accumulated in float32.
        raw = mixed.einsum("bqhd,bkhd->bhqk", q, k)
    if scheme.content_logits is not None:
        raw = raw + scheme.content_logits(params, q, k, q_pos, k_pos).astype(jnp.float32)
    logits = raw * jnp.float32(scheme.logit_scale(q.shape[-1]))
    if scheme.bias is not None:
        logits = logits + scheme.bias(params, q_pos, k_pos).astype(jnp.float32)
    if scheme.token_bias is not None:
        logits = logits + scheme.token_bias(params, q_tok, k_tok, q_pos, k_pos).astype(
            jnp.float32)
    if scheme.map_logits is not None:
        logits = scheme.map_logits(params, logits, q_pos, k_pos).astype(jnp.float32)
    return logits


def window_mask(q_pos, k_pos, window: int, causal: bool) -> jax.Array:
    """Sliding-window (local layer) pairs [B, 1, q, k], by POSITIONS like the causal mask.

    Encoder: |i - j| <= window // 2 (ModernBERT's local layers). Causal: the query and the
    window - 1 keys before it, 0 <= i - j < window (Mistral / gpt-oss `sliding_window`); the
    causal mask itself removes j > i.
    """
    rel = q_pos[:, :, None] - k_pos[:, None, :]
    if causal:
        return (rel < window)[:, None]
    return (jnp.abs(rel) <= window // 2)[:, None]


def tile_mask(q_pos, k_pos, kv_mask, q_seg, k_seg, causal: bool,
              window: Optional[int] = None) -> Optional[jax.Array]:
    """Which (query, key) pairs may attend, broadcastable to [B, 1, q, k]; None = all.
    window: a local layer's sliding window (`window_mask`); None = global."""
    masks = [] if window is None else [window_mask(q_pos, k_pos, window, causal)]
    if kv_mask is not None:
        masks.append(kv_mask[:, None, None, :])
    if q_seg is not None:
        masks.append((q_seg[:, :, None] == k_seg[:, None, :])[:, None])
    if causal:
        masks.append((k_pos[:, None, :] <= q_pos[:, :, None])[:, None])
    if not masks:
        return None
    mask = masks[0]
    for extra in masks[1:]:
        mask = mask & extra
    return mask


def count_keys(mask: Optional[jax.Array], shape: tuple) -> jax.Array:
    """Number of keys each query may attend, [B, 1, q] int32, from a tile mask of `shape`."""
    batch, _, len_q, len_k = shape
    if mask is None:
        return jnp.full((batch, 1, len_q), len_k, jnp.int32)
    return jnp.broadcast_to(mask, shape).sum(-1, dtype=jnp.int32)


def logn_factor(n_keys: jax.Array, logn_length: float) -> jax.Array:
    """log(n)/log(logn_length) as float32, the shape of `n_keys` (keys each query may attend);
    n < 1 (no key) maps to 0, not -inf."""
    n = jnp.maximum(n_keys, 1).astype(jnp.float32)
    return jnp.log(n) / jnp.float32(math.log(logn_length))


def scales_by_count(scheme: Scheme, logn_length) -> bool:
    """Whether each query's logits are multiplied by a function of its key count."""
    return logn_length is not None or scheme.length_scale is not None


def count_factor(scheme: Scheme, params, n_keys: jax.Array, logn_length) -> jax.Array:
    """What each query's scaled logits are multiplied by, from n_keys [B, 1, q] (the keys it
    may attend, after masks): log-n (log(n)/log(logn_length)) times the scheme's
    `length_scale` [B, H, q] (SSMax's s_h log n). [B, 1 or H, q] float32; call it only when
    `scales_by_count`."""
    factor = None if logn_length is None else logn_factor(n_keys, logn_length)
    if scheme.length_scale is not None:
        own = scheme.length_scale(params, n_keys).astype(jnp.float32)
        factor = own if factor is None else factor * own
    return factor


def combine_values(scheme: Scheme, params, probs, v, q_pos, k_pos, v_major=None) -> jax.Array:
    """probs @ v (+ content_values), [B, q, H, D] float32. Linear in probs, so chunked calls
    it with unnormalized tile probabilities and rescales like an online softmax.
    v_major: the same values as [B, H, k, D] (heads-major; see tile_logits' k_major)."""
    if v_major is not None:
        out = jnp.swapaxes(mixed.einsum("bhqk,bhkd->bhqd", probs.astype(v.dtype), v_major), 1, 2)
    else:
        out = mixed.einsum("bhqk,bkhd->bqhd", probs.astype(v.dtype), v)
    if scheme.content_values is not None:
        out = out + scheme.content_values(params, probs, q_pos, k_pos).astype(jnp.float32)
    return out


