"""CoPE, contextual position encoding (Golovneva et al. 2024, "Contextual Position Encoding:
Learning to Count What's Important").

Positions are counts of keys, not token distances: each (query i, key l) pair has a gate
g_il = sigmoid(logit_il) of the scaled attention logit, and key j sits at the fractional
position p_ij = sum of the gates from j to i (posjax/attention/counts.py has the exact sums,
the masks and how chunked carries them across key blocks). The logit gains the query's
product with a learned position embedding interpolated at p_ij:
    z_ij = (1 - w) * q_i . e[floor p_ij] + w * q_i . e[ceil p_ij],   w = p_ij - floor p_ij,
with p clamped to npos - 1 (the paper's `npos_max`), one table [npos, D] per layer shared by
the heads, initialized to zeros as in the paper.

Encoders: CoPE is causal. For keys after the query posjax counts the gates from the query up
to the key and reads a second table, so left and right stay distinguishable:
e[side, p] with side 0 at or before the query, 1 after it.

Not fused in the Pallas kernel (the counts run across key blocks); posjax.kernels refuses it.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from posjax.positions.base import Params, Scheme
from posjax.positions.registry import register


def interpolate(table_logits: jax.Array, counts: jax.Array, side: jax.Array) -> jax.Array:
    """z [B, H, q, k] from table_logits [B, H, q, S, P] (q_i . e[s, p]) at fractional counts
    [B, H, q, k] (clamped to P - 1) on table `side` [B, 1, q, k] (0 or 1)."""
    npos = table_logits.shape[-1]
    flat = table_logits.reshape(table_logits.shape[:3] + (-1,))  # [B, H, q, S*P]
    p = jnp.minimum(counts, npos - 1)
    lo = jnp.floor(p)
    w = p - lo  # the only differentiable part of the index
    lo = lo.astype(jnp.int32)
    hi = jnp.minimum(lo + 1, npos - 1)
    base = jnp.broadcast_to(side * npos, p.shape)
    z_lo = jnp.take_along_axis(flat, base + lo, axis=-1)
    z_hi = jnp.take_along_axis(flat, base + hi, axis=-1)
    return (1 - w) * z_lo + w * z_hi


@register
@dataclasses.dataclass(frozen=True)
class Cope(Scheme):
    """Contextual position encoding; see the module docstring.

    Fields: npos, the number of position embeddings (counts are clamped to npos - 1). A fixed
    number, not model.max_length: the table keeps its shape when eval.py rebuilds the model
    for longer inputs (counts past npos - 1 read the last row, CoPE's own clamp).
    """

    name: ClassVar[str] = "cope"
    no_decay: ClassVar[tuple[str, ...]] = ("emb",)

    npos: int = 64

    def __post_init__(self):
        n = self.npos
        if not (isinstance(n, int) and not isinstance(n, bool) and n >= 2):
            self.fail("npos", n, "an int >= 2 (position embeddings; counts clamp at npos - 1)")

    def init_layer(self, rng: jax.Array) -> Params:
        del rng
        dims = self.bound_dims
        sides = 1 if dims.causal else 2
        return {"emb": jnp.zeros((sides, self.npos, dims.head_dim), jnp.float32)}

    def count_gates(self, params, logits):
        del params
        return jax.nn.sigmoid(logits)

    def count_logits(self, params, q, counts, q_pos, k_pos):
        emb = params["emb"].astype(jnp.float32)
        table_logits = jnp.einsum("bqhd,spd->bhqsp", q.astype(jnp.float32), emb)
        after = (k_pos[:, None, :] > q_pos[:, :, None])[:, None].astype(jnp.int32)
        if emb.shape[0] == 1:  # causal: every attended key is at or before the query
            after = jnp.zeros_like(after)
        return interpolate(table_logits, counts, after)
