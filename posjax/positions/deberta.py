"""DeBERTa disentangled attention (He et al. 2021), DeBERTa-v2 conventions.

raw_ij = q_i.k_j + c2p_ij + p2c_ij, logits = raw / sqrt(3D) (sqrt(2D) with one term), where
  c2p_ij = q_i . Kr[clip(delta_ij + span, 0, 2*span-1)]            (content -> position)
  p2c_ij = k_j . Qr[clip(-delta'_ji + span, 0, 2*span-1)]          (position -> content)
  delta_ij = deberta_bucket(pos_i - pos_j) (QUERY minus key: the opposite sign of T5),
  delta'_ji = deberta_bucket(pos_j - pos_i), i.e. HF's p2c gathers on the key axis and
  transposes. deberta_bucket is odd, so -delta'_ji == delta_ij: both terms read the same row.
This mirrors HF transformers models/deberta_v2/modeling_deberta_v2.py
(`DisentangledSelfAttention.disentangled_attention_bias`).

Parameter layout (a choice, see the Deberta docstring): per layer, the PROJECTED relative
tables Kr = LN(P) W_pos_key + b and Qr = LN(P) W_pos_query + b, each [2*span, H, D].
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from posjax.positions.absolute import take_rows
from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.registry import register
from posjax.positions.relative_ops import gather_heads_last, normal_init, table_logits


def deberta_bucket(
    relative_position: jax.Array, *, bucket_size: int = 256, max_position: int = 512
) -> jax.Array:
    """DeBERTa-v2 log buckets of relative positions (QUERY minus KEY), int32, sign kept.

    HF `make_log_bucket_position`: mid = bucket_size // 2; |r| <= mid is kept exactly;
    beyond, sign(r) * (ceil(log(|r|/mid) / log((max_position-1)/mid) * (mid-1)) + mid), so
    |r| = max_position-1 maps to bucket_size-1 and larger |r| keep growing slowly (callers
    clip to the table). bucket_size <= 0 or max_position <= 0 disables bucketing (HF
    `build_relative_position` then returns the raw distance). The log is float32.
    """
    rel = jnp.asarray(relative_position).astype(jnp.int32)
    if bucket_size <= 0 or max_position <= 0:
        return rel
    mid = bucket_size // 2
    # A select, not jnp.sign: the same numbers where it matters (|rel| > mid), and the Pallas
    # kernels call this function in-kernel, where Mosaic cannot lower `sign` without a TPU.
    sign = jnp.where(rel < 0, -1, 1)
    abs_pos = jnp.where((rel < mid) & (rel > -mid), mid - 1, jnp.abs(rel)).astype(jnp.float32)
    log_max = jnp.log(jnp.float32((max_position - 1) / mid))
    log_pos = jnp.ceil(jnp.log(abs_pos / np.float32(mid)) / log_max * np.float32(mid - 1)) + mid
    return jnp.where(abs_pos <= mid, rel, log_pos.astype(jnp.int32) * sign)


@register
@dataclasses.dataclass(frozen=True)
class Deberta(Scheme):
    """DeBERTa-v2 disentangled attention as a content_logits hook plus a 1/sqrt(kD) scale.

    Parameters: per layer `pos_key` (Kr, when c2p) and `pos_query` (Qr, when p2c), each
    [2*span, H, D] with span = bucket_size (or max_position when bucket_size == 0).
    DeBERTa keeps ONE relative embedding P [2*span, E] for the whole model and projects it
    in each layer (share_att_key=False: pos_key_proj / pos_query_proj, after a LayerNorm
    when norm_rel_ebd="layer_norm"). The hooks run once per attention TILE, so projecting P
    there would cost 2*span*E*H*D flops per tile (about 24x the q.k of a 128x128 tile); we
    therefore learn the projected tables directly, one pair per layer. A HF checkpoint
    converts exactly (Kr = LN(P) @ W_pos_key^T + b per layer); what differs in training is
    that P is not tied across layers (no share_att_key either). No dropout on the tables.
    """

    name = "deberta"
    c2p: bool = True
    p2c: bool = True
    bucket_size: int = 256  # HF position_buckets
    max_position: int = 512  # HF max_relative_positions
    # Enhanced Mask Decoder (He et al. 2021, sec. 3.2; microsoft/DeBERTa `emd_context_layer`):
    # relative positions in every layer, ABSOLUTE positions only before the MLM head. The last
    # layer runs `emd` more times on its own input H (keys, values) with queries H + P[pos],
    # then each pass's output (DeBERTa: 2 passes). P is a learned table of `emd_rows` rows
    # (None = model.max_length), BERT init. 0 = no decoder.
    emd: int = 0
    emd_rows: Optional[int] = None

    def decoder_passes(self) -> int:
        return self.emd

    def emd_table_rows(self, dims: Dims) -> int:
        return dims.max_length if self.emd_rows is None else self.emd_rows

    def init_decoder(self, rng: jax.Array) -> Params:
        if not self.emd:
            return {}
        dims = self.bound_dims
        shape = (self.emd_table_rows(dims), dims.hidden)
        return {"table": 0.02 * jax.random.truncated_normal(rng, -2.0, 2.0, shape, jnp.float32)}

    def decoder_query(self, params: Params, h: jax.Array, pos: jax.Array) -> jax.Array:
        return h + take_rows(params["table"], pos).astype(h.dtype)

    @property
    def span(self) -> int:
        return self.bucket_size if self.bucket_size > 0 else self.max_position

    def init_layer(self, rng: jax.Array) -> Params:
        dims = self.bound_dims
        # HF: LayerNorm'd embeddings (unit variance) through a Linear with N(0, 0.02) weights,
        # so the projected rows start with std 0.02*sqrt(hidden); start the tables there.
        std = 0.02 * math.sqrt(dims.hidden)
        shape = (2 * self.span, dims.num_heads, dims.head_dim)
        rk, rq = jax.random.split(rng)
        params = {}
        if self.c2p:
            params["pos_key"] = normal_init(rk, shape, std)
        if self.p2c:
            params["pos_query"] = normal_init(rq, shape, std)
        return params

    def check(self, dims: Dims, length: int) -> None:
        if not (isinstance(self.emd, int) and not isinstance(self.emd, bool) and self.emd >= 0):
            self.fail("emd", self.emd, "an int >= 0 (enhanced mask decoder passes; 0 = off)")
        rows = self.emd_rows
        if rows is not None and not (isinstance(rows, int) and not isinstance(rows, bool)
                                     and rows >= 1):
            self.fail("emd_rows", rows, "None (= model.max_length) or an int >= 1")
        if self.emd and length > self.emd_table_rows(dims):
            self.fail("emd_rows", rows, f"at least the {length} positions asked for (the EMD "
                      "table has no row past its end)")
        for field in ("c2p", "p2c"):
            if not isinstance(getattr(self, field), bool):
                self.fail(field, getattr(self, field), "True or False")
        if not (self.c2p or self.p2c):
            self.fail("c2p", self.c2p, "c2p or p2c must be True (else DeBERTa is plain BERT)")
        if not (isinstance(self.max_position, int) and self.max_position >= 1):
            self.fail("max_position", self.max_position, "an int >= 1")
        if not (isinstance(self.bucket_size, int) and self.bucket_size >= 0):
            self.fail("bucket_size", self.bucket_size, "an int >= 0 (0 = no log buckets)")
        if self.bucket_size > 0:
            mid = self.bucket_size // 2
            if mid < 2:
                self.fail("bucket_size", self.bucket_size, "0 or an int >= 4")
            if self.max_position - 1 <= mid:
                self.fail("max_position", self.max_position,
                          f"an int > bucket_size//2 + 1 = {mid + 1} (log-bucket range)")

    def logit_scale(self, head_dim: int) -> float:
        # HF: scale_factor = 1 + c2p + p2c; every term is divided by sqrt(D * scale_factor).
        return 1.0 / math.sqrt(head_dim * (1 + int(self.c2p) + int(self.p2c)))

    def _bucket(self, rel: jax.Array) -> jax.Array:
        return deberta_bucket(rel, bucket_size=self.bucket_size, max_position=self.max_position)

    def content_logits(self, params, q, k, q_pos, k_pos):
        span = self.span
        q_minus_k = q_pos.astype(jnp.int32)[:, :, None] - k_pos.astype(jnp.int32)[:, None, :]
        out = 0.0
        if self.c2p:
            index = jnp.clip(self._bucket(q_minus_k) + span, 0, 2 * span - 1)
            out = out + table_logits(q, params["pos_key"], index)
        if self.p2c:
            # HF builds r_pos with the KEY as row (k - q), gathers along the key's own scores
            # k_j . Qr[r] at -r_pos + span, then transposes to [query, key].
            index_kq = jnp.clip(-self._bucket(-q_minus_k) + span, 0, 2 * span - 1)
            scores = jnp.einsum("bkhd,rhd->bkrh", k, params["pos_query"].astype(k.dtype),
                                preferred_element_type=jnp.float32)  # [B, Lk, R, H]
            p2c = gather_heads_last(scores, jnp.swapaxes(index_kq, 1, 2))  # [B, H, Lk, Lq]
            out = out + jnp.swapaxes(p2c, 2, 3)
        return out
