"""Transformer-XL relative attention (Dai et al. 2019), for any position arrays.

raw_ij = (q_i + u).k_j + (q_i + v).(W_r R_{i-j}), R_r = [sin(r w_f) | cos(r w_f)] (the XL
`PositionalEmbedding`: half sines, half cosines, w_f = 10000^(-2f/d_R)), u, v per head.
The `content_factors` hook gives raw in factored form, raw_ij = [q_i + u | query_side_i] .
[k_j | key_side_j] (below), which the compiled CPU kernel runs as plain attention with key dim
D + d_R.

The original computes B = (q+v).W_r R for all klen distances and realigns it with the
"relative shift" (see google-deepmind/randomized_positional_encodings `relative_shift`),
which assumes contiguous positions. Here positions are explicit arrays (packing, offsets,
randomized positions) and a tile may hold any of them, so we use the angle-difference
identity instead, which is exact for every pair and any sign of i - j:
  a_f = (q_i+v).W_r[sin_f], b_f = (q_i+v).W_r[cos_f]   (per query and head)
  a_f sin((p_i-p_j) w_f) + b_f cos((p_i-p_j) w_f)
    = (a_f sin p_i w_f + b_f cos p_i w_f) cos p_j w_f + (b_f sin p_i w_f - a_f cos p_i w_f) sin p_j w_f
so the position term is query_side_i . key_side_j, with query_side [Lq, d_R] per head and
key_side [Lk, d_R] = [cos p_j w | sin p_j w] shared by the heads: one [Lq, d_R] x [d_R, Lk]
product per head, no [Lq, Lk, d_R] tensor, no gather, no assumption that positions are
contiguous. Cost per (i, j) is d_R multiply-adds
(the relative-shift version spends D per pair plus klen*E*H*D once per layer; a tile hook
cannot share that once-per-layer work), so `rel_dim` lets you shrink d_R below the hidden
size that XL uses.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import jax
import jax.numpy as jnp
import numpy as np

from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.registry import register
from posjax.positions.relative_ops import normal_init


def xl_inverse_frequencies(rel_dim: int) -> np.ndarray:
    """w_f = 1 / 10000^(2f/d_R), f = 0..d_R/2-1 (XL `PositionalEmbedding.inv_freq`)."""
    return (1.0 / (10000.0 ** (np.arange(0.0, rel_dim, 2.0) / rel_dim))).astype(np.float32)


def xl_sinusoid(distance: jax.Array, rel_dim: int) -> jax.Array:
    """R_r = [sin(r w) | cos(r w)] for integer distances r (any sign), float32 [..., d_R]."""
    angle = jnp.asarray(distance).astype(jnp.float32)[..., None] * xl_inverse_frequencies(rel_dim)
    return jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], axis=-1)


@register
@dataclasses.dataclass(frozen=True)
class TransformerXL(Scheme):
    """Transformer-XL's u, v biases and W_r-projected sinusoidal R_{i-j}, per layer.

    Params: u [H, D], v [H, D], w_r [d_R, H, D] with d_R = rel_dim (None: the model width,
    as in XL). Bidirectional encoders see i - j of both signs; the sinusoid covers both.
    """

    name = "xl"
    # u and v are XL's r_w_bias and r_r_bias: biases, which BERT's LAMB excludes by name
    no_decay: ClassVar[tuple[str, ...]] = ("u", "v")
    rel_dim: Optional[int] = None  # d_R; None = dims.hidden (XL's d_model)
    # 'normal': N(0, 0.02^2), XL's init_std; 'fan_in': a normal of stddev 1/sqrt(d_R) truncated
    # at 2 stddev, haiku's Linear, which the algorithmic benchmark's reference projects R with
    w_r_init: str = "normal"

    def _rel_dim(self, dims: Dims) -> int:
        return dims.hidden if self.rel_dim is None else self.rel_dim

    def init_layer(self, rng: jax.Array) -> Params:
        dims = self.bound_dims
        # XL initializes weights and r_w_bias / r_r_bias with N(0, init_std = 0.02).
        ru, rv, rw = jax.random.split(rng, 3)
        h, d = dims.num_heads, dims.head_dim
        return {
            "u": normal_init(ru, (h, d), 0.02),
            "v": normal_init(rv, (h, d), 0.02),
            "w_r": self._w_r(rw, (self._rel_dim(dims), h, d)),
        }

    def _w_r(self, rng: jax.Array, shape: tuple[int, int, int]) -> jax.Array:
        if self.w_r_init == "fan_in":
            return jax.random.truncated_normal(rng, -2.0, 2.0, shape, jnp.float32) / np.sqrt(
                shape[0])
        return normal_init(rng, shape, 0.02)

    def check(self, dims: Dims, length: int) -> None:
        if self.w_r_init not in ("normal", "fan_in"):
            self.fail("w_r_init", self.w_r_init, "'normal' (XL: N(0, 0.02^2)) or 'fan_in' "
                      "(haiku's Linear: stddev 1/sqrt(rel_dim), truncated at 2 stddev)")
        rel_dim = self._rel_dim(dims)
        if not (isinstance(rel_dim, int) and rel_dim >= 2 and rel_dim % 2 == 0):
            self.fail("rel_dim", self.rel_dim,
                      f"None (the model width, here {dims.hidden}) or an even int >= 2 "
                      "(half sines, half cosines)")

    def content_factors(self, params, q, k, q_pos, k_pos):
        """(q + u, query_side [B, Lq, H, d_R], key_side [B, Lk, 1, d_R]), in q's dtype."""
        del k
        dt = q.dtype
        rel_dim = params["w_r"].shape[0]
        half = rel_dim // 2
        qv = q + params["v"].astype(dt)
        ab = _per_head_projection(qv, params["w_r"].astype(dt))  # [B, Lq, H, d_R]
        a, b = ab[..., :half], ab[..., half:]
        # Position angles in float32 (bf16 cannot even hold integers past 256).
        inv_freq = xl_inverse_frequencies(rel_dim)
        ang_q = q_pos.astype(jnp.float32)[:, :, None, None] * inv_freq  # [B, Lq, 1, F]
        ang_k = k_pos.astype(jnp.float32)[:, :, None] * inv_freq  # [B, Lk, F]
        # sin and cos through one transposed table each (as rotary.rotate_by_angles): XLA:CPU
        # then computes them once per position, where it otherwise recomputed them inside the
        # per-head fusions that read them, for every head and again in the backward (at 8
        # heads of 8 and d_R 64, a single XL layer's factors took 3x as long).
        sq, cq = jnp.moveaxis(jnp.stack([jnp.sin(ang_q), jnp.cos(ang_q)], axis=-1), -1, 0)
        ck, sk = jnp.moveaxis(jnp.stack([jnp.cos(ang_k), jnp.sin(ang_k)], axis=-1), -1, 0)
        query_side = jnp.concatenate([a * sq + b * cq, b * sq - a * cq], axis=-1)
        key_side = jnp.concatenate([ck, sk], axis=-1)
        return (q + params["u"].astype(dt), query_side.astype(dt),
                key_side.astype(dt)[:, :, None, :])


SMALL_HEAD = 32  # head_dim below which the per-head product runs as one block-diagonal matmul


def _per_head_projection(x: jax.Array, w: jax.Array) -> jax.Array:
    """einsum('bqhd,rhd->bqhr') in float32: each head's [D] times its own [D, d_R].

    With small heads (head_dim < SMALL_HEAD: the algorithmic benchmark's 8 heads of 8) as ONE
    matmul of the [H*D] features against the block-diagonal [H*D, H*d_R] (H times the
    products, but a dense product XLA:CPU runs near its matmul rate, where the per-head
    batched dots with an 8-long contraction ran at a tenth of it, and their layout
    transposes cost as much again); otherwise the per-head einsum. Same sums either way.
    """
    batch, length, heads, dim = x.shape
    rel = w.shape[0]
    if dim >= SMALL_HEAD:
        return jnp.einsum("bqhd,rhd->bqhr", x, w, preferred_element_type=jnp.float32)
    block = jnp.einsum("rhd,hg->hdgr", w, jnp.eye(heads, dtype=w.dtype)).reshape(
        heads * dim, heads * rel)
    y = jnp.dot(x.reshape(batch * length, heads * dim), block,
                preferred_element_type=jnp.float32)
    return y.reshape(batch, length, heads, rel)
