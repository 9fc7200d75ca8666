"""The sides of a query for a scheme whose `normalize` hook replaces softmax (stick-breaking):
which keys each side holds, and the hook called on a tile with its keys nearest first; and
the whole-row scores of a scheme whose `carried_scores` hook replaces q.k (PaTH), whose sides
split the keys (the query's own key on the side before only), and its companion
`carried_keys` on a key tile.

A side is the keys before the query (k_pos <= q_pos) or after it (k_pos >= q_pos); the query's
own position is on both. Causal attention has the side before only. The hook reads a side's
keys from the query outward: attention reverses the key axis of a tile for the side before
(and the chunked path walks its key blocks downward), so that the hook sees one orientation.

Imports nothing from posjax above `positions/`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from posjax.positions.base import Scheme


def sides(causal: bool) -> tuple[bool, ...]:
    """The sides attention runs, as `before` flags: (True,) causal, (True, False) otherwise."""
    return (True,) if causal else (True, False)


def side_mask(mask, q_pos, k_pos, before: bool, shared: bool = True) -> jax.Array:
    """The pairs of one side that may attend, [B, 1, q, k] bool (`mask` from tile_mask, or
    None when every pair may). shared=False (carried_scores): the query's own position is on
    the side before only, so every key is on one side."""
    rel = k_pos[:, None, :] - q_pos[:, :, None]
    own = (rel <= 0 if before else (rel >= 0 if shared else rel > 0))[:, None]
    return own if mask is None else mask & own


def normalize_tile(scheme: Scheme, params, logits, mask, carry, q_pos, k_pos, before: bool,
                   n_sides: int):
    """(weights [B, H, q, k] float32 in array order, carry [B, H, q]) of one tile of one side:
    the scheme's `normalize` on the tile with its keys nearest first."""
    if before:  # nearest first = the keys in reverse array order
        logits, mask, k_pos = logits[..., ::-1], mask[..., ::-1], k_pos[:, ::-1]
    weights, carry = scheme.normalize(params, logits, mask, carry, q_pos, k_pos, n_sides)
    weights = weights.astype(jnp.float32)
    return (weights[..., ::-1] if before else weights), carry


def carried_keys(scheme: Scheme, params, k, k_tok):
    """k_tok as `carried_scores` receives it for the key tile k [B, n, H, D]: the scheme's
    `carried_keys` of the tile (once per key tile, never per query block), or k_tok as it is
    for a scheme without that hook."""
    if scheme.carried_keys is None:
        return k_tok
    return scheme.carried_keys(params, k, k_tok)


def carried_rows(scheme: Scheme, params, q, k, q_tok, k_tok, mask, q_pos, k_pos,
                 causal: bool) -> jax.Array:
    """Raw scores [B, H, q, k] float32 of queries over whole key rows from the scheme's
    `carried_scores`, one call per side (the carry starts at q); `mask` from tile_mask or
    None; k_tok already through `carried_keys` on these rows. Each key takes the scores of
    its side."""
    raw = 0.0
    for before in sides(causal):
        own = side_mask(mask, q_pos, k_pos, before, shared=False)
        scores, _ = scheme.carried_scores(params, q.astype(jnp.float32), k, q_tok, k_tok, own,
                                          q_pos, k_pos, before)
        raw = raw + jnp.where(side_mask(None, q_pos, k_pos, before, shared=False), scores, 0.0)
    return raw
