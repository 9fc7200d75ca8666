"""T5's bucketed bias in the kernels: the bucket of every pair by posjax.positions.t5.t5_bucket,
then the head's table entry, as a select per bucket present in the tile (Mosaic has no vector
gather). The table's gradient is that gather's transpose, the sum of dS per bucket: written as
the same loop, because the loop's bounds come from the tile (JAX cannot reverse-differentiate
a loop with traced bounds)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from jax import lax

from posjax.kernels.terms.base import HEAD_SCALARS, Built, Call, Term, pow2, term_for
from posjax.kernels.tile import F32, add_at, head_scalar, tile_min_max, total
from posjax.positions.t5 import T5, t5_bucket


@term_for(T5)
@dataclasses.dataclass(frozen=True)
class T5Term(Term):
    bidirectional: bool = True
    num_buckets: int = 32
    max_distance: int = 128

    @classmethod
    def build(cls, scheme, call: Call) -> Built:
        table = call.params["table"].astype(jnp.float32).T  # [H, num_buckets]
        width = pow2(table.shape[-1])  # Triton wants power-of-two shapes
        table = jnp.pad(table, ((0, 0), (0, width - table.shape[-1])))
        term = cls(bidirectional=scheme.bound_bidirectional, num_buckets=scheme.num_buckets,
                   max_distance=scheme.max_distance)
        return Built(term, {"hp": table}, call.q, call.k)

    def inputs(self) -> dict:
        return {"hp": HEAD_SCALARS}

    def grads(self) -> dict:
        return {"hp": "dq"}

    def _buckets(self, t):
        rel = t.kpos.astype(jnp.int32) - t.qpos.astype(jnp.int32)
        bucket = t5_bucket(rel, bidirectional=self.bidirectional,
                           num_buckets=self.num_buckets, max_distance=self.max_distance)
        return (bucket,) + tile_min_max(bucket)

    def bias(self, r, t):
        bucket, lo, hi = self._buckets(t)

        def body(b, acc):
            return acc + jnp.where(bucket == b, head_scalar(r["hp"], b), 0.0)

        return lax.fori_loop(lo, hi + 1, body, jnp.zeros(bucket.shape, F32))

    def grad_step(self, pass_, r, t, ctx, grads):
        bucket, lo, hi = self._buckets(t)

        def body(b, acc):
            return add_at(acc, b, total(jnp.where(bucket == b, t.dlog, 0.0)))

        return {**grads, "hp": lax.fori_loop(lo, hi + 1, body, grads["hp"])}
