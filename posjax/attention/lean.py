"""The lean path for short sequences: the reference's math on whole arrays, with the mask
built ONCE per forward (`build_mask`, called by the encoder) instead of once per layer, and
applied as one additive term instead of two full-size selects. Rows with nothing to mask
(`dense_rows`: one example per row, no padding, which the caller knows) skip it entirely.

What it does differently from reference.py, and why the numbers are the same:
  logits + bias, bias = 0 where a key may be attended and MASK_VALUE (-1e30) elsewhere: a
    masked logit minus the row max underflows exp to exactly 0, as the reference's select.
  a row with no key at all (padding queries) would come out uniform; `row_ok` (0/1 per query,
    also built once) zeroes it, as the reference does.
Schemes that count keys per query (CoPE's gates, log-n scaling), replace softmax
(`normalize`: stick-breaking) or carry scores per side (`carried_scores`: PaTH) keep the
reference: they need the boolean mask inside the layer.
tests/attention/test_lean.py checks values and gradients against the reference.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from posjax.tiling.tiles import (MASK_VALUE, combine_values, prepare, rotate, rotate_values,
                                    tile_logits, tile_mask)
from posjax.positions.base import Scheme


class LeanMask(NamedTuple):
    """Built once per forward: bias [B, 1, Lq, Lk] float32 (0 or MASK_VALUE), row_ok
    [B, 1, Lq, 1] float32 (0 for queries with no key to attend)."""

    bias: jax.Array
    row_ok: jax.Array


def supports(scheme: Scheme, logn_length) -> bool:
    """Whether the lean path runs this scheme (else the reference does)."""
    return (scheme.count_gates is None and scheme.length_scale is None
            and scheme.normalize is None and scheme.carried_scores is None
            and logn_length is None)


def build_mask(q_pos, k_pos, kv_mask, segment_ids, causal: bool) -> Optional[LeanMask]:
    """The mask of every layer of one forward, or None when nothing is masked."""
    q_seg, k_seg = segment_ids if segment_ids is not None else (None, None)
    mask = tile_mask(q_pos, k_pos, kv_mask, q_seg, k_seg, causal)
    if mask is None:
        return None
    batch, len_q, len_k = q_pos.shape[0], q_pos.shape[1], k_pos.shape[1]
    mask = jnp.broadcast_to(mask, (batch, 1, len_q, len_k))
    bias = jnp.where(mask, 0.0, MASK_VALUE).astype(jnp.float32)
    return LeanMask(bias, mask.any(-1, keepdims=True).astype(jnp.float32))


def lean_attention(q, k, v, *, scheme, params, q_pos, k_pos, mask: Optional[LeanMask]):
    """Same result as reference_attention for the schemes `supports` accepts."""
    q_tok, k_tok = prepare(scheme, params, q, k, v, q_pos, k_pos)
    q, k = rotate(scheme, params, q, k, q_pos, k_pos)
    v = rotate_values(scheme, params, v, k_pos, k_pos)
    logits = tile_logits(scheme, params, q, k, q_pos, k_pos, q_tok, k_tok)
    if mask is not None:
        logits = logits + mask.bias
    m = jax.lax.stop_gradient(logits.max(-1, keepdims=True))
    p = jnp.exp(logits - m)
    probs = p / p.sum(-1, keepdims=True)  # >= 1: the max term is exp(0)
    if mask is not None:
        probs = probs * mask.row_ok
    out = combine_values(scheme, params, probs, v, q_pos, k_pos)
    return rotate_values(scheme, params, out, q_pos, k_pos, inverse=True).astype(q.dtype)
