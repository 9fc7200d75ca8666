"""FoX's forget-gate sums in the kernels: the bias c_i - c_j of every tile (keys at or before
the query; c_j - c_i after it), by posjax.positions.fox.forget_tile, from per-token inputs.

c = cumsum(log f) per (batch, head, token) is computed once per forward by the scheme's
`prepare` in `build` (plain JAX, so the gradients of the gate parameters and of k through c
come from JAX), and enters the kernels twice: blocked like q ('cq', [n, 1] columns) and like
k ('ck', [1, n] rows). The backward pass returns the gradient of c: JAX's derivative of
forget_tile on the tile (tile.tile_vjp; dS before the log-n factor, zero on masked pairs),
summed over the tile's keys in the dq pass (cq) and over its queries in the dkv pass (ck).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from posjax.kernels.terms.base import KEY_TOKENS, QUERY_TOKENS, Built, Call, Term, term_for
from posjax.kernels.tile import F32, col, row, tile_vjp
from posjax.positions.fox import Fox, forget_tile


@term_for(Fox)
@dataclasses.dataclass(frozen=True)
class FoxTerm(Term):
    @classmethod
    def build(cls, scheme, call: Call) -> Built:
        # c [B, L, H] from the unpadded q, k, v; the kernels take c [B, H, L_pad] per side.
        q_tok, k_tok = scheme.prepare(call.params, call.q, call.k, call.v, call.q_pos,
                                      call.k_pos)

        def per_side(x, length):
            x = x.astype(jnp.float32)
            x = jnp.pad(x, ((0, 0), (0, length - x.shape[1]), (0, 0)))
            return jnp.moveaxis(x, -1, 1)

        arrays = {"cq": per_side(q_tok, call.len_q), "ck": per_side(k_tok, call.len_k)}
        return Built(cls(), arrays, call.q, call.k)

    def inputs(self) -> dict:
        return {"cq": QUERY_TOKENS, "ck": KEY_TOKENS}

    def grads(self) -> dict:
        return {"cq": "dq", "ck": "dkv"}

    def bias(self, r, t):
        return forget_tile(col(r["cq"], t.qsl), row(r["ck"], t.ksl), t.qpos, t.kpos)

    def grad_step(self, pass_, r, t, ctx, grads):
        # forget_tile is linear in c: the derivative at c = 0 is the derivative anywhere.
        zero = jnp.zeros(t.dlog.shape, F32)
        if pass_ == "dq":
            (dc,) = tile_vjp(lambda c: forget_tile(c, zero, t.qpos, t.kpos), (zero,), t.dlog)
            return {**grads, "cq": grads["cq"] + jnp.sum(dc, axis=1, keepdims=True)}
        (dc,) = tile_vjp(lambda c: forget_tile(zero, c, t.qpos, t.kpos), (zero,), t.dlog)
        return {**grads, "ck": grads["ck"] + jnp.sum(dc, axis=0, keepdims=True)}
