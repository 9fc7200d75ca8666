"""KERPLE in the kernels: the bias -r1 * log(1 + r2 |i - j|) or -r1 * |i - j| ** r2 of every
tile, by posjax.positions.bias.kerple_tile, with r1, r2 per-head scalars. Their gradients are
JAX's derivatives of that formula on the tile (tile.tile_vjp), summed over the tile.

The reference's straight-through clamp runs in `build`, outside the kernels: they see the
clamped values and JAX passes their gradient to the raw parameters unchanged.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from posjax.kernels.terms.base import HEAD_SCALARS, Built, Call, Term, term_for
from posjax.kernels.tile import F32, add_at, head_scalar, tile_vjp, total
from posjax.positions.bias import Kerple, kerple_tile, straight_through_clamp


@term_for(Kerple)
@dataclasses.dataclass(frozen=True)
class KerpleTerm(Term):
    variant: str = "log"

    @classmethod
    def build(cls, scheme, call: Call) -> Built:
        params = call.params
        r1 = straight_through_clamp(params["r1"], scheme.eps)
        r2 = straight_through_clamp(params["r2"], scheme.eps,
                                    2.0 if scheme.variant == "power" else None)
        hp = jnp.stack([r1, r2], axis=-1).astype(jnp.float32)  # [H, 2]
        return Built(cls(variant=scheme.variant), {"hp": hp}, call.q, call.k)

    def inputs(self) -> dict:
        return {"hp": HEAD_SCALARS}

    def grads(self) -> dict:
        return {"hp": "dq"}

    def _formula(self, t):
        dist = jnp.abs(t.kpos.astype(jnp.int32) - t.qpos.astype(jnp.int32)).astype(F32)
        return lambda r1, r2: kerple_tile(r1, r2, dist, self.variant)

    def bias(self, r, t):
        return self._formula(t)(head_scalar(r["hp"], 0), head_scalar(r["hp"], 1))

    def grad_step(self, pass_, r, t, ctx, grads):
        shape = t.dlog.shape
        r1, r2 = (jnp.full(shape, head_scalar(r["hp"], i)) for i in (0, 1))
        d_r1, d_r2 = tile_vjp(self._formula(t), (r1, r2), t.dlog)
        return {**grads, "hp": add_at(add_at(grads["hp"], 0, total(d_r1)), 1, total(d_r2))}
