"""Tile helpers shared by the relative schemes (relative.py, deberta.py, tupe.py).

A relative scheme looks up one of R "distance bins" for every (query i, key j) pair of a tile.
These helpers never expand the bins to [Lq, Lk, D]: logits are q @ table^T ([B, Lq, R, H],
the heads last) then a gather; value terms scatter the probabilities onto the R bins, then one
small @ table.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def normal_init(rng: jax.Array, shape: tuple[int, ...], stddev: float) -> jax.Array:
    """float32 N(0, stddev^2): parameters are float32 whatever the compute dtype."""
    return stddev * jax.random.normal(rng, shape, jnp.float32)


def key_minus_query(q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
    """[B, Lq, Lk] int32 key position minus query position (j - i)."""
    return k_pos.astype(jnp.int32)[:, None, :] - q_pos.astype(jnp.int32)[:, :, None]


def gather_heads_last(scores: jax.Array, index: jax.Array) -> jax.Array:
    """scores [B, Lq, R, H] (one row per distance bin, the heads last), index [B, Lq, Lk]
    (shared by the heads) -> [B, H, Lq, Lk]: out[b, h, i, j] = scores[b, i, index[b, i, j], h].

    With the heads last, one index fetches all H heads' values at once: XLA:CPU runs a gather
    (and its transpose, a scatter) one index at a time, so this is H times fewer steps than
    gathering [B, H, Lq, R] element by element."""
    out = jnp.take_along_axis(scores, index[..., None], axis=2)  # [B, Lq, Lk, H]
    return jnp.moveaxis(out, -1, 1)


def scatter_by_distance(probs: jax.Array, index: jax.Array, num_bins: int) -> jax.Array:
    """Sum probabilities that fall into the same distance bin: the transpose of the gather.

    probs [B, H, Lq, Lk], index [B, Lq, Lk] in [0, num_bins) -> [B, Lq, num_bins, H] float32
    (heads last, as `gather_heads_last` reads them),
    out[b, i, r, h] = sum_j probs[b, h, i, j] * [index[b, i, j] == r]. Accumulates in float32
    (the sum has up to Lk terms). A scatter-add of H-wide rows, so no [Lq, Lk, num_bins]
    one-hot is built.
    """
    b, _, lq, _ = probs.shape
    rows = jnp.moveaxis(probs.astype(jnp.float32), 1, -1)  # [B, Lq, Lk, H]
    bi = jnp.arange(b)[:, None, None]
    qi = jnp.arange(lq)[None, :, None]
    zeros = jnp.zeros((b, lq, num_bins, rows.shape[-1]), jnp.float32)
    return zeros.at[bi, qi, index].add(rows)


def table_logits(q: jax.Array, table: jax.Array, index: jax.Array) -> jax.Array:
    """q [B, Lq, H, D] dotted with table rows picked by index [B, Lq, Lk] -> [B, H, Lq, Lk] f32.

    `table` is [R, D] (shared by the heads) or [R, H, D] (one per head). Computes all R
    products per query in the input dtype with float32 accumulation, then gathers.
    """
    t = table.astype(q.dtype)
    spec = "bqhd,rd->bqrh" if t.ndim == 2 else "bqhd,rhd->bqrh"
    scores = jnp.einsum(spec, q, t, preferred_element_type=jnp.float32)
    return gather_heads_last(scores, index)


def table_values(probs: jax.Array, table: jax.Array, index: jax.Array) -> jax.Array:
    """sum_j probs[b, h, i, j] * table[index[b, i, j]] -> [B, Lq, H, D] in probs.dtype.

    Linear in `probs`, so it is correct for the unnormalized probabilities of an online
    softmax. `table` is [R, D] (shared by the heads).
    """
    binned = scatter_by_distance(probs, index, table.shape[0])
    out = jnp.einsum("bqrh,rd->bqhd", binned, table.astype(jnp.float32))
    return out.astype(probs.dtype)
