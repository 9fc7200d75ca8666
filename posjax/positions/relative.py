"""Relative position schemes that act inside attention: Shaw et al. (2018) and NEZHA.

Both add a term that depends on the clipped distance `clip(j - i, -K, K)` to the logits
(`q_i . a^K_ij`) and to the output (`sum_j p_ij a^V_ij`). Shaw learns the two tables of
2K+1 rows; NEZHA uses one FIXED sinusoid table for both.

The naive form builds a [Lq, Lk, D] tensor of a_ij (17 GB at 8k tokens). Here the tables are
never expanded: logits are `q @ table^T` ([B, H, Lq, 2K+1]) followed by a gather of the right
distance, and values scatter the probabilities onto the 2K+1 distance bins before one small
`@ table`. Memory is O(Lq*Lk + Lq*(2K+1)) per head, and every hook works on any (query block,
key block) tile because it only looks at the tile's position arrays.

The other relative schemes live in their own modules (t5.py, deberta.py, xl.py, tupe.py; the
tile helpers they share in relative_ops.py).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from posjax.positions.base import Dims, Params, Scheme
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
        table = nezha_table(self.max_relative_position, self.bound_dims.head_dim)
        index = clipped_index(q_pos, k_pos, self.max_relative_position)
        return table_logits(q, table, index)

    def content_values(self, params, probs, q_pos, k_pos):
        del params
        table = nezha_table(self.max_relative_position, self.bound_dims.head_dim)
        index = clipped_index(q_pos, k_pos, self.max_relative_position)
        return table_values(probs, table, index)
