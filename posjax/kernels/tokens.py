"""FoX's per-token forget-gate sums in the flash attention kernels (kind 'fox').

FoX (posjax.positions.fox) adds c_i - c_j to the logit of query i and key j when the key is at
or before the query, c_j - c_i after it (the encoder's mirror image), with c = cumsum(log f)
per (batch, head, token) computed once per forward by the scheme's `prepare` (plain JAX, in
dispatch.py, so the gradients of the gate parameters and of k through c come from JAX). The
kernels read c twice, blocked like q and like k:

  input  'cq' [B, H, Lq, W]   per-query column, like the logsumexp (W lanes, layout.py)
  input  'ck' [B, H, S, Lk]   per-key row, like the key ids (S sublanes)

and the backward pass returns the gradient of c from the logits' gradient dS (what the bias
sees, before the log-n factor; zero on masked pairs): with sign_ij = +1 for a key at or before
the query and -1 after it,
  dc_i += sum_j sign_ij dS_ij  (dq kernel, over its key blocks)
  dc_j -= sum_i sign_ij dS_ij  (dkv kernel, over its query blocks).
Everything is [n, 1] columns and [1, n] rows, as the rest of the tile math (fused.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from posjax.kernels.fused import F32


def tile_bias(qpos, kpos, cq, ck) -> jax.Array:
    """[bq, bk] float32: c_q - c_k at or before the query, c_k - c_q after it (qpos, cq
    [bq, 1] columns; kpos, ck [1, bk] rows)."""
    diff = cq.astype(F32) - ck.astype(F32)
    return jnp.where(kpos <= qpos, diff, -diff)


def tile_grads(dlog, qpos, kpos) -> tuple[jax.Array, jax.Array]:
    """(dc of the tile's queries [bq, 1], dc of its keys [1, bk]) from dS [bq, bk]."""
    signed = jnp.where(kpos <= qpos, dlog, -dlog)
    return jnp.sum(signed, axis=1, keepdims=True), -jnp.sum(signed, axis=0, keepdims=True)


def to_layout(cq: jax.Array, ck: jax.Array, lanes: int, sublanes: int) -> dict:
    """c of the queries [B, H, Lq] and keys [B, H, Lk] (float32) as the kernel inputs."""
    return {"cq": jnp.broadcast_to(cq[..., None], cq.shape + (lanes,)),
            "ck": jnp.broadcast_to(ck[:, :, None, :], ck.shape[:2] + (sublanes,) + ck.shape[2:])}


def query_output(shape, block_q: int, lanes: int):
    """(shape, BlockSpec) of the dq pass's dc output [B, H, Lq, W] on grid (b, h, q block)."""
    b, h, lq = shape
    return (jax.ShapeDtypeStruct((b, h, lq, lanes), F32),
            pl.BlockSpec((None, None, block_q, lanes), lambda b, h, i, *_: (b, h, i, 0)))


def key_output(shape, block_k: int, sublanes: int):
    """(shape, BlockSpec) of the dkv pass's dc output [B, H, S, Lk] on grid (b, h, k block)."""
    b, h, lk = shape
    return (jax.ShapeDtypeStruct((b, h, sublanes, lk), F32),
            pl.BlockSpec((None, None, sublanes, block_k), lambda b, h, i, *_: (b, h, 0, i)))
