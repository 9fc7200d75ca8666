"""DeBERTa's disentangled terms in the kernels: c2p q_i . Kr_h[idx] and p2c k_j . Qr_h[idx'],
with per-head projected tables [H, 2*span, D] (rows padded to a power of two for Triton) and
the log buckets of posjax.positions.deberta.deberta_bucket computed on the tile:
c2p idx = clip(bucket(i - j) + span, 0, 2*span-1), p2c idx' = clip(-bucket(j - i) + span, ...).
The tables' gradients (the gathers' transposes) are summed in the dq pass; p2c also feeds dk."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from posjax.kernels.terms.base import HEAD_TABLE, Built, Call, Term, pow2, term_for
from posjax.kernels.tile import gather_rows, scatter_rows, table_grad, tile_min_max
from posjax.positions.deberta import Deberta, deberta_bucket


@term_for(Deberta)
@dataclasses.dataclass(frozen=True)
class DebertaTerm(Term):
    bucket_size: int = 256
    max_position: int = 512
    span: int = 0  # rows of each position table are 2 * span
    c2p: bool = False
    p2c: bool = False

    @classmethod
    def build(cls, scheme, call: Call) -> Built:
        rows = 2 * scheme.span

        def per_head(name):  # [2*span, H, D] -> [H, Rp, D]
            table = jnp.transpose(call.params[name].astype(jnp.float32), (1, 0, 2))
            return jnp.pad(table, ((0, 0), (0, pow2(rows) - rows), (0, 0)))

        term = cls(bucket_size=scheme.bucket_size, max_position=scheme.max_position,
                   span=scheme.span, c2p=bool(scheme.c2p), p2c=bool(scheme.p2c))
        arrays = {}
        if term.c2p:
            arrays["hk"] = per_head("pos_key")
        if term.p2c:
            arrays["hq"] = per_head("pos_query")
        return Built(term, arrays, call.q, call.k)

    def inputs(self) -> dict:
        return {n: HEAD_TABLE for n, on in (("hk", self.c2p), ("hq", self.p2c)) if on}

    def grads(self) -> dict:
        return {n: "dq" for n in self.inputs()}

    def _index(self, t, p2c: bool):
        rel = t.qpos.astype(jnp.int32) - t.kpos.astype(jnp.int32)
        buckets = dict(bucket_size=self.bucket_size, max_position=self.max_position)
        bucket = -deberta_bucket(-rel, **buckets) if p2c else deberta_bucket(rel, **buckets)
        idx = jnp.clip(bucket + self.span, 0, 2 * self.span - 1)
        return (idx,) + tile_min_max(idx)

    def logits(self, r, t, s):
        c2p = self._index(t, p2c=False) if self.c2p else None
        p2c = self._index(t, p2c=True) if self.p2c else None
        if c2p is not None:
            s = s + gather_rows(t.q[0], r["hk"], *c2p, cast_to=t.q[0].dtype)
        if p2c is not None:
            # Key-major [bk, bq] index: the p2c term k_j . Qr[idx_ij] is then the same
            # row-wise gather as c2p (one aligned 2-D transpose per tile instead of turning
            # per-key reductions from sublanes into lanes).
            p2c = (p2c[0].T,) + p2c[1:]
            s = s + gather_rows(t.k[0], r["hq"], *p2c, cast_to=t.k[0].dtype).T
        return s, (c2p, p2c)  # p2c index key-major

    def dq(self, r, t, ctx, draw, dq):
        c2p = ctx[0]
        if c2p is None:
            return dq
        return (dq[0] + scatter_rows(draw, r["hk"], *c2p, dq[0].shape[-1]),)

    def dk(self, r, t, ctx, draw, dk):
        p2c = ctx[1]  # k_j . Qr[idx] -> dk_j
        if p2c is None:
            return dk
        return (dk[0] + scatter_rows(draw.T, r["hq"], *p2c, dk[0].shape[-1]),)

    def grad_step(self, pass_, r, t, ctx, grads):
        c2p, p2c = ctx
        grads = dict(grads)
        if c2p is not None:
            grads["hk"] = table_grad(t.draw, t.q[0], *c2p, grads["hk"])
        if p2c is not None:
            grads["hq"] = table_grad(t.draw.T, t.k[0], *p2c, grads["hq"])
        return grads
