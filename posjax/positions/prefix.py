"""Prefix sums along the last axis of a key tile, for a scheme that runs a total across the
keys: stick-breaking's stick left (stick_breaking.py). CoPE's gate counts
(posjax/attention/counts.py) keep jnp.cumsum: the product measured no faster there.

Why not jnp.cumsum alone: XLA:CPU runs it as a reduce-window scan, which took over a third of
stick-breaking's attention at 128-key tiles. Up to DOT_MAX entries the sums are one product
with a triangular 0/1 matrix instead, which XLA runs as a dense dot (and differentiates into
another). Each sum then adds its terms in another order than a scan: the same numbers to
float32 rounding. Past DOT_MAX the product's O(n^2) work would outgrow the scan's O(n), so
longer rows (the reference path on whole rows) keep jnp.cumsum.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

DOT_MAX = 256  # entries up to which a prefix sum is a product with a triangular matrix


def prefix_sum(x: jax.Array, exclusive: bool = False) -> jax.Array:
    """Sums of x[..., :j + 1] along the last axis (exclusive: of x[..., :j], 0 at j = 0), in
    float32 for float32 x."""
    n = x.shape[-1]
    if n <= DOT_MAX:
        # [i, j] = 1 where entry i enters sum j: i <= j, or i < j when exclusive
        triangle = jnp.triu(jnp.ones((n, n), x.dtype), 1 if exclusive else 0)
        return jnp.dot(x, triangle, precision=jax.lax.Precision.HIGHEST,
                       preferred_element_type=jnp.float32)
    if exclusive:  # a shifted inclusive sum: no cancellation (cumsum - term)
        x = jnp.pad(x[..., :-1], [(0, 0)] * (x.ndim - 1) + [(1, 0)])
    return jnp.cumsum(x, axis=-1)
