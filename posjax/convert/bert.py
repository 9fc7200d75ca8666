"""BERT-layout checkpoints: BERT, RoBERTa, RoFormer and NEZHA share one layer layout.

What differs is only where positions enter:
  BERT      embeddings.position_embeddings [512, E] -> learned table (positions 0..511)
  RoBERTa   the same table, but HF numbers real tokens from padding_idx + 1 = 2, so rows 0..1
            are dropped: posjax row p is HF row p + 2 (HF `create_position_ids_from_input_ids`)
  RoFormer  no table: interleaved RoPE inside attention. HF RoFormer's
            `apply_rotary_position_embeddings` builds sin/cos [s0,s0,s1,s1,...] and
            rotate_half = [-x1, x0, -x3, x2, ...], i.e. the pair (x_2i, x_2i+1) is rotated by
            pos * 10000^(-2i/d): exactly posjax `apply_rope(interleaved=True)` (checked
            numerically against HF in tests/convert). The stored `embed_positions` sinusoid
            table is a buffer, recomputed by posjax at any length.
  NEZHA     no table: fixed sinusoid relative keys + values (transformers 4.x
            models/deprecated/nezha layout, `nezha.` prefix); the stored
            `relative_positions_encoding.positions_encoding` buffers are recomputed by posjax.
"""

from __future__ import annotations

import numpy as np

from posjax.convert.hf_weights import Weights, bert_layer, dense, mlm_head, norm
from posjax.errors import ConfigError

# HF names of the MLM head per family: {'dense', 'norm', 'bias', 'decoder'}.
BERT_HEAD = {"dense": "cls.predictions.transform.dense", "norm": "cls.predictions.transform.LayerNorm",
             "bias": "cls.predictions.bias", "decoder": "cls.predictions.decoder"}
ROBERTA_HEAD = {"dense": "lm_head.dense", "norm": "lm_head.layer_norm", "bias": "lm_head.bias",
                "decoder": "lm_head.decoder"}

# Buffers and heads posjax does not use (no warning for these).
IGNORED_SUFFIXES = ("position_ids", "positions_encoding", "embed_positions.weight", "masked_bias",
                    "attention.self.distance_embedding.weight")


def embeddings(w: Weights, config, src, perm) -> dict:
    """word (+ token type) + LayerNorm (+ RoFormer's projection) (+ learned table)."""
    m = config.model
    word = w.get("embeddings.word_embeddings.weight")
    out = {"word": {"embedding": word[perm] if perm is not None else word},
           "norm": norm(w, "embeddings.LayerNorm")}
    type_table = w.get("embeddings.token_type_embeddings.weight") if w.has(
        "embeddings.token_type_embeddings.weight") else None
    if m.type_vocab_size > 0:
        out["token_type"] = {"embedding": type_table}
    if config.position.name in ("learned", "hierarchical"):
        table = w.get("embeddings.position_embeddings.weight")[src.position_offset:]
        table = table[: m.max_length]
        if src.fold_token_type and type_table is not None:
            table = table + type_table[0]
        out["position"] = {"tree": {"table": table}}
    if w.has("embeddings_project.weight"):  # RoFormer with embedding_size < hidden
        out["project"] = dense(w, "embeddings_project")
    return out


def map_weights(w: Weights, config, src, perm=None) -> tuple[dict, bool]:
    """posjax params (pure dict) of a BERT-layout checkpoint; second value: MLM head found."""
    m = config.model
    head_dim = m.hidden // m.num_heads
    layers = {i: bert_layer(w, f"encoder.layer.{i}", m.num_heads, head_dim)
              for i in range(m.num_layers)}
    params = {"encoder": {"embeddings": embeddings(w, config, src, perm), "layers": layers}}
    names = ROBERTA_HEAD if src.model_type == "roberta" else BERT_HEAD
    head = mlm_head(w, names, w.tensors["embeddings.word_embeddings.weight"])
    if head is not None:
        if perm is not None:
            head["bias"] = head["bias"][perm]
        params["lm_head"] = head
    w.mark_used([n for n in w.tensors if n.endswith(IGNORED_SUFFIXES)])
    return params, head is not None


def check_roformer_table(w: Weights, head_dim: int) -> None:
    """A RoFormer checkpoint's stored sinusoid must be the standard one posjax recomputes."""
    name = "encoder.embed_positions.weight"
    if not w.has(name):
        return
    table = w.tensors[name]
    n = min(table.shape[0], 64)
    if table.shape[1] == head_dim and not np.allclose(table[:n], roformer_table(n, head_dim),
                                                       atol=1e-4):
        raise ConfigError("checkpoint tensor", name, "HF RoFormer's standard sinusoid table "
                          "(sin | cos of pos * 10000^(-2i/d)); this one differs")


def roformer_table(rows: int, head_dim: int) -> np.ndarray:
    """HF RoFormer's `embed_positions` sinusoid [rows, head_dim]: sin | cos of
    pos * 10000^(-2i/d) (float32)."""
    pos = np.arange(rows, dtype=np.float64)[:, None]
    inv = 10000.0 ** (-2.0 * np.arange(head_dim // 2) / head_dim)
    return np.concatenate([np.sin(pos * inv), np.cos(pos * inv)], axis=-1).astype(np.float32)
