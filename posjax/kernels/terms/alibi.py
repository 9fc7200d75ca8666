"""ALiBi in the kernels: the bias -slope * |i - j| (or -slope * max(i - j, 0)) of every tile,
by posjax.positions.bias.alibi_tile, with the head's slope a per-head scalar. The slopes
are constants of the head count: no gradient."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from posjax.kernels.terms.base import HEAD_SCALARS, Built, Call, Term, term_for
from posjax.kernels.tile import head_scalar
from posjax.positions.bias import Alibi, alibi_slopes, alibi_tile


@term_for(Alibi)
@dataclasses.dataclass(frozen=True)
class AlibiTerm(Term):
    symmetric: bool = True

    @classmethod
    def build(cls, scheme, call: Call) -> Built:
        slopes = jnp.asarray(alibi_slopes(call.q.shape[2]), jnp.float32)[:, None]  # [H, 1]
        symmetric = True if scheme.symmetric is None else bool(scheme.symmetric)
        return Built(cls(symmetric=symmetric), {"hp": slopes}, call.q, call.k)

    def inputs(self) -> dict:
        return {"hp": HEAD_SCALARS}

    def bias(self, r, t):
        rel = t.qpos.astype(jnp.int32) - t.kpos.astype(jnp.int32)
        return alibi_tile(head_scalar(r["hp"], 0), rel, self.symmetric)
