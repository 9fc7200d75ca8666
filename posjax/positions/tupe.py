"""TUPE (Ke et al. 2021, "Rethinking Positional Encoding in Language Pre-training").

Untied positional attention: positions never touch the token embeddings; instead every head
gets an absolute positional correlation as a BIAS on the logits,
  bias_ij = (p_i U_q)(p_j U_k)^T / sqrt(2D),   p = LayerNorm(P[pos]),
and the word-word term is scaled by 1/sqrt(2D) too (logit_scale). [CLS] (position 0) is
"reset": its positional correlations are replaced by learned per-head values, theta_1 for
[CLS] -> others (row 0) and theta_2 for others -> [CLS] (column 0). TUPE-R adds a T5
bucket bias on top, with two extra buckets for the [CLS] row and column.

Reference: guolinke/TUPE fairseq/modules/transformer_sentence_encoder.py
(`pos`, `pos_ln`, `pos_proj`, `pos_scaling = (E/H * 2)^-0.5`, `cls_2_other`, `other_2_cls`,
`rp_bucket[:, 0] = rel_pos_bins`, `rp_bucket[0, :] = rel_pos_bins // 2`) and
multihead_attention.py (`scaling = (head_dim * scale_factor)^-0.5`, scale_factor = 2).
One bias shared by all layers, as in that code (share_layers=True).

Conventions that differ from the reference code, for conversion:
  * Position t uses row t of a dims.max_length-row table. TUPE's table has max_len+1 rows
    and token t reads row t+1; its rows 0 and 1 only produce the two [CLS] values
    (cls_2_other = p_0.p_0, other_2_cls = p_1.p_1 after projection). Here those values are
    the explicit per-head parameters the paper describes (theta_cls_to_other,
    theta_other_to_cls); a converter computes them from TUPE's rows 0 and 1 and shifts the
    table up by one.
  * "[CLS]" means position 0 of each packed example (positions restart at 0), so the reset
    also works for packed rows. [CLS] -> [CLS] gets theta_cls_to_other (the row wins, as in
    TUPE where row 0 is written last).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp

from posjax.errors import ConfigError
from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.registry import register
from posjax.positions.relative_ops import normal_init, key_minus_query
from posjax.positions.t5 import check_buckets, t5_bucket

_LN_EPS = 1e-5  # fairseq LayerNorm default


@register
@dataclasses.dataclass(frozen=True)
class Tupe(Scheme):
    """TUPE-A (relative=False) or TUPE-R (relative=True) as a bias hook.

    Params: pos [max_length, E], ln_scale/ln_bias [E], proj_q/proj_k [E, H, D] and
    bias_q/bias_k [H, D] (TUPE's pos_proj E -> 2E split into q and k halves), theta_cls_to_other
    and theta_other_to_cls [H]; with relative=True also rel_table [num_buckets + 1, H].
    The positional projections are recomputed for the rows of each tile (no [L, L] state).
    """

    name = "tupe"
    no_decay: ClassVar[tuple[str, ...]] = ("ln_scale", "ln_bias", "bias_q", "bias_k",
                                           "theta_cls_to_other", "theta_other_to_cls")
    relative: bool = False  # TUPE-R: add a T5 bucket bias
    num_buckets: int = 32  # TUPE rel_pos_bins
    max_distance: int = 128  # TUPE max_rel_pos
    cls_reset: bool = True  # position 0 is [CLS]: reset its positional correlations
    share_layers: bool = True

    def init_layer(self, rng: jax.Array) -> Params:
        dims = self.bound_dims
        # TUPE uses BERT init: N(0, 0.02) for embeddings and linear weights, zero biases.
        e, h, d = dims.hidden, dims.num_heads, dims.head_dim
        r = jax.random.split(rng, 4)
        params = {
            "pos": normal_init(r[0], (dims.max_length, e), 0.02),
            "ln_scale": jnp.ones((e,), jnp.float32),
            "ln_bias": jnp.zeros((e,), jnp.float32),
            "proj_q": normal_init(r[1], (e, h, d), 0.02),
            "proj_k": normal_init(r[2], (e, h, d), 0.02),
            "bias_q": jnp.zeros((h, d), jnp.float32),
            "bias_k": jnp.zeros((h, d), jnp.float32),
            "theta_cls_to_other": jnp.zeros((h,), jnp.float32),
            "theta_other_to_cls": jnp.zeros((h,), jnp.float32),
        }
        if self.relative:
            params["rel_table"] = normal_init(r[3], (self.num_buckets + 1, h), 0.02)
        return params

    def check(self, dims: Dims, length: int) -> None:
        for field in ("relative", "cls_reset", "share_layers"):
            if not isinstance(getattr(self, field), bool):
                self.fail(field, getattr(self, field), "True or False")
        if length > dims.max_length:
            # Not a position field: the sequence is longer than the absolute table.
            raise ConfigError("length", length,
                              f"at most model.max_length={dims.max_length} (TUPE's position "
                              "table rows; a gather past the table would silently clamp)")
        if self.relative:
            if dims.causal:
                self.fail("relative", self.relative,
                          "False for a causal model: TUPE-R's buckets are bidirectional and "
                          "reserve buckets for [CLS]")
            check_buckets(self, True, self.num_buckets, self.max_distance)

    def logit_scale(self, head_dim: int) -> float:
        # TUPE scales the word-word term like the positional one: 1/sqrt(2D).
        return 1.0 / math.sqrt(2 * head_dim)

    def _project(self, params, pos: jax.Array, which: str) -> jax.Array:
        """LayerNorm(P[pos]) U + b -> [B, L, H, D] float32 (positions only, no input dtype)."""
        x = jnp.take(params["pos"], pos, axis=0)
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        x = (x - mean) * jax.lax.rsqrt(var + _LN_EPS) * params["ln_scale"] + params["ln_bias"]
        return jnp.einsum("ble,ehd->blhd", x, params[f"proj_{which}"]) + params[f"bias_{which}"]

    def bias(self, params, q_pos, k_pos):
        pq = self._project(params, q_pos, "q")
        pk = self._project(params, k_pos, "k")
        d = pq.shape[-1]
        out = jnp.einsum("bqhd,bkhd->bhqk", pq, pk) / math.sqrt(2 * d)
        q_cls = (q_pos == 0)[:, None, :, None]  # [B, 1, Lq, 1]
        k_cls = (k_pos == 0)[:, None, None, :]  # [B, 1, 1, Lk]
        if self.cls_reset:
            to_cls = params["theta_other_to_cls"][None, :, None, None]
            from_cls = params["theta_cls_to_other"][None, :, None, None]
            out = jnp.where(k_cls, to_cls, out)
            out = jnp.where(q_cls, from_cls, out)  # row 0 last: [CLS]->[CLS] = cls_to_other
        if self.relative:
            nb = self.num_buckets
            bucket = t5_bucket(key_minus_query(q_pos, k_pos), bidirectional=True,
                               num_buckets=nb, max_distance=self.max_distance)
            if self.cls_reset:
                # TUPE: others -> [CLS] use the extra bucket nb; [CLS] -> others use nb // 2,
                # a bucket t5_bucket never produces (key after query at distance 0).
                bucket = jnp.where(k_cls[:, 0], nb, bucket)
                bucket = jnp.where(q_cls[:, 0], nb // 2, bucket)
            rel = jnp.take(params["rel_table"], bucket, axis=0)  # [B, Lq, Lk, H]
            out = out + jnp.transpose(rel, (0, 3, 1, 2))
        return out.astype(jnp.float32)
