"""Shaw and NEZHA in the kernels: the logit term q_i . a^K_idx and the value term
sum_j p_ij a^V_idx with idx = clip(j - i, -K, K) + K, from a table of 2K+1 rows shared by all
heads (rows padded to a power of two for Triton). Gathers and scatters loop over the rows
present in the tile (tile.gather_rows). Shaw learns both tables (their gradients: the
transposes of those gathers, in the dq pass); NEZHA's fixed sinusoid table serves as both."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from jax import lax

from posjax.kernels.terms.base import TABLE, Built, Call, Term, pow2, term_for
from posjax.kernels.tile import F32, gather_rows, scatter_rows, tile_min_max
from posjax.positions.relative import Nezha, Shaw, nezha_table


@term_for(Shaw)
@dataclasses.dataclass(frozen=True)
class ShawTerm(Term):
    max_rel: int = 0  # K, the clipping distance

    @classmethod
    def build(cls, scheme, call: Call) -> Built:
        kmax = scheme.max_relative_position
        pad = ((0, pow2(2 * kmax + 1) - (2 * kmax + 1)), (0, 0))
        arrays = {n: jnp.pad(call.params[p].astype(jnp.float32), pad)
                  for n, p in (("tabk", "keys"), ("tabv", "values"))}
        return Built(cls(max_rel=kmax), arrays, call.q, call.k)

    def inputs(self) -> dict:
        return {"tabk": TABLE, "tabv": TABLE}

    def grads(self) -> dict:
        return {"tabk": "dq", "tabv": "dq"}

    def _values_table(self, r):
        return r["tabv"]

    def logits(self, r, t, s):
        k = self.max_rel
        idx = jnp.clip(t.kpos.astype(jnp.int32) - t.qpos.astype(jnp.int32), -k, k) + k
        table = (idx,) + tile_min_max(idx)
        q_whole = t.q[0]
        return s + gather_rows(q_whole, r["tabk"], *table, cast_to=q_whole.dtype), table

    def values(self, r, t, table, p, dim: int):
        return scatter_rows(p, self._values_table(r), *table, dim)

    def dp(self, r, t, table, do):
        return gather_rows(do, self._values_table(r), *table)

    def dq(self, r, t, table, draw, dq):
        return (dq[0] + scatter_rows(draw, r["tabk"], *table, dq[0].shape[-1]),)

    def grad_step(self, pass_, r, t, table, grads):
        dtabk, dtabv = table_grads(t.draw, t.p, t.q[0], t.do, *table, grads["tabk"],
                                   grads["tabv"])
        return {**grads, "tabk": dtabk, "tabv": dtabv}


@term_for(Nezha)
@dataclasses.dataclass(frozen=True)
class NezhaTerm(ShawTerm):
    """One fixed table for keys and values (no gradient)."""

    @classmethod
    def build(cls, scheme, call: Call) -> Built:
        kmax = scheme.max_relative_position
        pad = ((0, pow2(2 * kmax + 1) - (2 * kmax + 1)), (0, 0))
        table = jnp.pad(nezha_table(kmax, call.q.shape[-1]), pad)
        return Built(cls(max_rel=kmax), {"tabk": table}, call.q, call.k)

    def inputs(self) -> dict:
        return {"tabk": TABLE}

    def grads(self) -> dict:
        return {}

    def _values_table(self, r):
        return r["tabk"]


def table_grads(draw, probs, q, do, idx, lo, hi, dtabk, dtabv):
    """(dtabk, dtabv) [Rp, D] plus the table gradients of one tile (Shaw), in one loop:
    dA^K[r] += sum_i (sum_{j: idx=r} draw_ij) q_i,  dA^V[r] += sum_i (sum_{j: idx=r} p_ij) dO_i."""
    q32, do32 = q.astype(F32), do.astype(F32)
    rows = lax.broadcasted_iota(jnp.int32, dtabk.shape, 0)

    def body(r, carry):
        gk, gv = carry
        wk = jnp.sum(jnp.where(idx == r, draw, 0.0), axis=1, keepdims=True)  # [bq, 1]
        wv = jnp.sum(jnp.where(idx == r, probs, 0.0), axis=1, keepdims=True)
        gk = gk + jnp.where(rows == r, jnp.sum(wk * q32, axis=0, keepdims=True), 0.0)
        gv = gv + jnp.where(rows == r, jnp.sum(wv * do32, axis=0, keepdims=True), 0.0)
        return gk, gv

    return lax.fori_loop(lo, hi + 1, body, (dtabk, dtabv))
