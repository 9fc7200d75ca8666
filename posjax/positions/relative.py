"""Relative position schemes that act inside attention: Shaw et al. (2018) and NEZHA.

Both add a term that depends on the clipped distance `clip(j - i, -K, K)` to the logits
(`q_i . a^K_ij`) and to the output (`sum_j p_ij a^V_ij`). Shaw learns the two tables of
2K+1 rows; NEZHA uses one FIXED sinusoid table for both.

The naive form builds a [Lq, Lk, D] tensor of a_ij (17 GB at 8k tokens). Here the tables are
never expanded. Shaw: logits are `q @ table^T` ([B, Lq, 2K+1, H]) followed by a gather of the
right distance, and values scatter the probabilities onto the 2K+1 distance bins before one
small `@ table`. NEZHA, whose table is a sinusoid: inside the band q is turned by its position
and dotted with the keys' sinusoids, one matmul like q.k (see "NEZHA's terms" below). Memory
is O(Lq*Lk + Lq*(2K+1)) per head, and every hook works on any (query block, key block) tile
because it only looks at the tile's position arrays.

The other relative schemes live in their own modules (t5.py, deberta.py, xl.py, tupe.py; the
tile helpers they share in relative_ops.py).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.registry import register
from posjax.positions.relative_ops import (
    normal_init,
    key_minus_query,
    table_logits,
    table_values,
)


# ---------------------------------------------------------------------------------------
# NEZHA's fixed table
# ---------------------------------------------------------------------------------------


def nezha_table(max_relative_position: int = 64, depth: int = 64) -> jax.Array:
    """The FIXED sinusoid table of NEZHA: [2K+1, depth] float32, K = max_relative_position.

    Row r encodes the SHIFTED index r = clip(j - i, -K, K) + K in 0..2K (not the signed
    distance): column 2m holds sin(r / 10000^(2m/depth)), column 2m+1 holds
    cos(r / 10000^(2m/depth)) (interleaved sin/cos).

    This is the convention of HF `NezhaRelativePositionsEncoding` (models/deprecated/nezha:
    `position = arange(0, 2K+1)`, `embeddings_table[:, 0::2] = sin(position * div_term)`,
    `[:, 1::2] = cos(...)`, `div_term = exp(arange(0, depth, 2) * -log(10000)/depth)`) and of
    bert4keras (`RelativePositionEmbedding(2*64+1, head_size, 'Sinusoidal')`, whose
    `Sinusoidal` initializer fills `[pos, 2i] = sin(pos/10000^(2i/depth))`, `[pos, 2i+1] = cos`).
    Both evaluate the sinusoid at the shifted index, so the middle row (distance 0) is the
    sinusoid of K, not of 0. Computed in float64 with numpy, returned as float32.
    """
    rows = 2 * max_relative_position + 1
    pos = np.arange(rows, dtype=np.float64)[:, None]
    dim = np.arange(depth)
    freq = np.power(10000.0, -(2.0 * (dim // 2)) / depth)  # column 2m and 2m+1 share a freq
    angle = pos * freq[None, :]
    table = np.where(dim % 2 == 0, np.sin(angle), np.cos(angle))
    return jnp.asarray(table, jnp.float32)


def clipped_index(q_pos: jax.Array, k_pos: jax.Array, max_relative_position: int) -> jax.Array:
    """Row of the (2K+1)-row table for each (i, j): clip(j - i, -K, K) + K, [B, Lq, Lk]."""
    k = max_relative_position
    return jnp.clip(key_minus_query(q_pos, k_pos), -k, k) + k


# ---------------------------------------------------------------------------------------
# Schemes
# ---------------------------------------------------------------------------------------


@register
@dataclasses.dataclass(frozen=True)
class Shaw(Scheme):
    """Shaw et al. 2018: learned clipped relative embeddings for keys and values.

    logits_ij = q_i . (k_j + a^K_ij) / sqrt(D);  out_i = sum_j p_ij (v_j + a^V_ij),
    a^X_ij = table_X[clip(j - i, -K, K) + K]. Each table has 2K+1 rows of depth D and is
    shared by the heads (as in the paper and tensor2tensor), one pair per layer.
    """

    name = "shaw"
    max_relative_position: int = 16  # K, the clipping distance

    def init_layer(self, rng: jax.Array) -> Params:
        dims = self.bound_dims
        rows = 2 * self.max_relative_position + 1
        rk, rv = jax.random.split(rng)
        return {
            "keys": normal_init(rk, (rows, dims.head_dim), 0.02),
            "values": normal_init(rv, (rows, dims.head_dim), 0.02),
        }

    def check(self, dims: Dims, length: int) -> None:
        if not (isinstance(self.max_relative_position, int) and self.max_relative_position >= 1):
            self.fail("max_relative_position", self.max_relative_position, "an int >= 1")

    def content_logits(self, params, q, k, q_pos, k_pos):
        del k
        index = clipped_index(q_pos, k_pos, self.max_relative_position)
        return table_logits(q, params["keys"], index)

    def content_values(self, params, probs, q_pos, k_pos):
        index = clipped_index(q_pos, k_pos, self.max_relative_position)
        return table_values(probs, params["values"], index)


@register
@dataclasses.dataclass(frozen=True)
class Nezha(Scheme):
    """NEZHA (Wei et al. 2019): Shaw's two hooks with ONE fixed sinusoid table, nothing learned.

    The same `nezha_table(K, D)` serves keys and values (as in HF NEZHA and bert4keras,
    where one non-trainable `RelativePositionEmbedding` feeds both terms). The key term is
    added to q.k before the 1/sqrt(D) scale (HF: `attention_scores + key_position_scores`,
    then `/ sqrt(head_size)`). No parameters: the table depth is the bound dims' head_dim.
    """

    name = "nezha"
    max_relative_position: int = 64  # K; NEZHA checkpoints use 64 (129 rows)

    def check(self, dims: Dims, length: int) -> None:
        if not (isinstance(self.max_relative_position, int) and self.max_relative_position >= 1):
            self.fail("max_relative_position", self.max_relative_position, "an int >= 1")

    def content_logits(self, params, q, k, q_pos, k_pos):
        del params, k
        return nezha_logits(q, q_pos, k_pos, self.max_relative_position)

    def content_values(self, params, probs, q_pos, k_pos):
        del params
        return nezha_values(probs, q_pos, k_pos, self.max_relative_position,
                            self.bound_dims.head_dim)


# ---------------------------------------------------------------------------------------
# NEZHA's terms without a table lookup
# ---------------------------------------------------------------------------------------
#
# Inside the band |j - i| <= K, row clip(j - i) + K of NEZHA's table is the sinusoid of
# (j - i + K): with a_i = (q_pos_i - K) w and b_j = k_pos_j w (w the column pair's
# frequency), column 2m is sin(b_j - a_i) = sin b_j cos a_i - cos b_j sin a_i and column
# 2m+1 is cos(b_j - a_i) = cos b_j cos a_i + sin b_j sin a_i. So q_i . a_ij is q_i turned by
# -a_i dotted with [sin b_j, cos b_j]: one matmul as large as q.k, and the value term is one
# as large as p.v, instead of a gather and a scatter over [Lq, Lk] (which XLA:CPU runs one
# index at a time). Outside the band every pair reads row 0 or row 2K: one dot per query.
# The angles are float32 products of positions, as RoPE's are: the terms agree with the
# table to about |position| * 2^-24 radians (tests/positions/test_relative.py).


def _nezha_angles(pos: jax.Array, depth: int, offset: int) -> tuple[jax.Array, jax.Array]:
    """sin and cos of (pos + offset) * w_m, [B, L, ceil(depth / 2)] float32 (w as in
    `nezha_table`: column pair m has frequency 10000^(-2m / depth))."""
    freq = np.power(10000.0, -(2.0 * np.arange((depth + 1) // 2)) / depth).astype(np.float32)
    angle = (pos.astype(jnp.int32) + offset).astype(jnp.float32)[..., None] * freq
    return jnp.sin(angle), jnp.cos(angle)


def _pairs(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The even (sin) and odd (cos) columns of the last axis; an odd depth's last even
    column gets a zero partner."""
    even, odd = x[..., 0::2], x[..., 1::2]
    if odd.shape[-1] < even.shape[-1]:
        odd = jnp.concatenate([odd, jnp.zeros_like(even[..., :1])], axis=-1)
    return even, odd


def _band(q_pos: jax.Array, k_pos: jax.Array, kmax: int):
    """(inside, after, before) [B, 1, Lq, Lk] bool: |j - i| <= K, j - i > K, j - i < -K."""
    rel = key_minus_query(q_pos, k_pos)[:, None]
    return jnp.abs(rel) <= kmax, rel > kmax, rel < -kmax


def nezha_logits(q: jax.Array, q_pos: jax.Array, k_pos: jax.Array, kmax: int) -> jax.Array:
    """q_i . nezha_table[clip(j - i, -K, K) + K] -> [B, H, Lq, Lk] float32 (q [B, Lq, H, D])."""
    depth = q.shape[-1]
    sa, ca = _nezha_angles(q_pos, depth, -kmax)
    sb, cb = _nezha_angles(k_pos, depth, 0)
    # Heads before queries for the product: its rows (h, i) are then contiguous in the
    # [B, H, Lq, Lk] result, and the transpose falls on the small [B, Lq, H, D] side.
    qe, qo = _pairs(jnp.moveaxis(q, 2, 1).astype(jnp.float32))  # [B, H, Lq, D / 2]
    sa, ca = sa[:, None], ca[:, None]
    turned = jnp.concatenate([qe * ca + qo * sa, qo * ca - qe * sa], axis=-1)
    basis = jnp.concatenate([sb, cb], axis=-1)
    inside = jnp.einsum("bhqd,bkd->bhqk", turned.astype(q.dtype), basis.astype(q.dtype),
                        preferred_element_type=jnp.float32)
    table = nezha_table(kmax, depth)
    ends = jnp.einsum("bqhd,rd->bhqr", q, table[jnp.array([0, 2 * kmax])].astype(q.dtype),
                      preferred_element_type=jnp.float32)
    in_band, after, _ = _band(q_pos, k_pos, kmax)
    return jnp.where(in_band, inside, jnp.where(after, ends[..., 1:], ends[..., :1]))


def nezha_values(probs: jax.Array, q_pos: jax.Array, k_pos: jax.Array, kmax: int,
                 depth: int) -> jax.Array:
    """sum_j probs[b, h, i, j] * nezha_table[clip(j - i, -K, K) + K] -> [B, Lq, H, depth] in
    probs.dtype. Linear in probs (unnormalized online-softmax tiles are fine)."""
    p = probs.astype(jnp.float32)
    in_band, after, before = _band(q_pos, k_pos, kmax)
    sa, ca = _nezha_angles(q_pos, depth, -kmax)
    sb, cb = _nezha_angles(k_pos, depth, 0)
    half = sb.shape[-1]
    basis = jnp.concatenate([sb, cb], axis=-1)
    # [B, H, Lq, .] throughout, as probs: the product reads probs in place, and only the
    # small result is transposed at the end.
    y = jnp.einsum("bhqk,bkd->bhqd", jnp.where(in_band, p, 0.0), basis)
    ys, yc = y[..., :half], y[..., half:]
    sa, ca = sa[:, None], ca[:, None]
    even, odd = ca * ys - sa * yc, ca * yc + sa * ys  # sin(b - a), cos(b - a) summed
    inside = jnp.stack([even, odd], axis=-1).reshape(*even.shape[:-1], 2 * half)[..., :depth]
    table = nezha_table(kmax, depth)
    ends = (jnp.where(before, p, 0.0).sum(-1)[..., None] * table[0]
            + jnp.where(after, p, 0.0).sum(-1)[..., None] * table[2 * kmax])  # [B, H, Lq, D]
    return jnp.moveaxis(inside + ends, 1, 2).astype(probs.dtype)
