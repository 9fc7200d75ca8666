"""Contextual counts (CoPE): the gated key counts p_ij that replace token distances, for the
reference (whole rows) and chunked (key blocks) paths.

With gates G_ij = count_gates(logits_ij), zero where the pair is masked, a key j at or before
the query counts the gates of the keys from it up to the query, and a key after the query
those from the query up to it:
    p_ij = sum_l G_il [k_pos_j <= k_pos_l <= q_pos_i]    (k_pos_j <= q_pos_i)
    p_ij = sum_l G_il [q_pos_i <= k_pos_l <= k_pos_j]    (k_pos_j >  q_pos_i)
Both come from one running sum along the keys: with C_ij the gate mass of keys 0..j
(inclusive), A_i the mass at or before the query and A-_i the mass strictly before it,
    p_ij = A_i - (C_ij - G_ij)   before,      p_ij = C_ij - A-_i   after.
That reads the keys in array order, so it needs the keys a query may attend in increasing
position order (true within an example; other examples and padding are masked, G = 0).

Chunked needs A and A- before the first key block: a pre-pass over the key blocks sums them
(`totals`), then the main pass carries each query's exclusive prefix of C across blocks, so
memory stays O(L x block).
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from posjax.positions.base import Scheme


def gates(scheme: Scheme, params, logits: jax.Array, mask: Optional[jax.Array]) -> jax.Array:
    """G [B, H, q, k] float32: the scheme's gates of the scaled logits, 0 where masked."""
    g = scheme.count_gates(params, logits).astype(jnp.float32)
    return g if mask is None else jnp.where(mask, g, 0.0)


def _before(q_pos, k_pos) -> jax.Array:
    return (k_pos[:, None, :] <= q_pos[:, :, None])[:, None]  # [B, 1, q, k]


def totals(g: jax.Array, q_pos, k_pos) -> tuple[jax.Array, jax.Array]:
    """(A, A-) [B, H, q]: gate mass at-or-before and strictly before each query, of one tile."""
    at_or_before = jnp.where(_before(q_pos, k_pos), g, 0.0).sum(-1)
    strictly = jnp.where((k_pos[:, None, :] < q_pos[:, :, None])[:, None], g, 0.0).sum(-1)
    return at_or_before, strictly


def counts(g: jax.Array, q_pos, k_pos, prefix: jax.Array, at_or_before: jax.Array,
           strictly_before: jax.Array) -> jax.Array:
    """p [B, H, q, k] of one tile; prefix [B, H, q] = gate mass of the keys before the tile."""
    c = prefix[..., None] + jnp.cumsum(g, axis=-1)
    return jnp.where(_before(q_pos, k_pos), at_or_before[..., None] - (c - g),
                     c - strictly_before[..., None])


def add_count_logits(scheme: Scheme, params, q, logits, g, q_pos, k_pos, prefix, at_or_before,
                     strictly_before) -> jax.Array:
    """logits + the scheme's count_logits at this tile's counts."""
    p = counts(g, q_pos, k_pos, prefix, at_or_before, strictly_before)
    return logits + scheme.count_logits(params, q, p, q_pos, k_pos).astype(jnp.float32)


def whole_row(scheme: Scheme, params, q, logits, mask, q_pos, k_pos) -> jax.Array:
    """The reference: counts over whole rows, added to the logits."""
    g = gates(scheme, params, logits, mask)
    a, a_minus = totals(g, q_pos, k_pos)
    return add_count_logits(scheme, params, q, logits, g, q_pos, k_pos, jnp.zeros_like(a), a,
                            a_minus)
