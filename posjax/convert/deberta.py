"""DeBERTa-v2/v3: BERT-layout layers whose attention adds c2p / p2c from relative embeddings.

HF keeps one relative table P = encoder.rel_embeddings [2*span, hidden] (LayerNorm'd by
encoder.LayerNorm when norm_rel_ebd='layer_norm') and projects it in every layer with the
layer's key/query projections (share_att_key=True, DeBERTa-v3) or with pos_key_proj /
pos_query_proj (share_att_key=False). posjax's `deberta` scheme learns the PROJECTED tables
per layer, so the conversion is exact: pos_key = LN(P) W_k^T + b_k, pos_query = LN(P) W_q^T + b_q,
each reshaped to [2*span, H, D] (computed here in float64).

Not converted (refused in hf_config): position_biased_input=True, the conv layer of
deberta-v2-xlarge (conv_kernel_size > 0), embedding_size != hidden_size, and DeBERTa v1
(model_type 'deberta', a different relative-position layout).
"""

from __future__ import annotations

import numpy as np

from posjax.convert.hf_weights import Weights, bert_layer, mlm_head, norm

LEGACY_HEAD = {"dense": "cls.predictions.transform.dense", "norm": "cls.predictions.transform.LayerNorm",
               "bias": "cls.predictions.bias", "decoder": "cls.predictions.decoder"}
HEAD = {"dense": "lm_predictions.lm_head.dense", "norm": "lm_predictions.lm_head.LayerNorm",
        "bias": "lm_predictions.lm_head.bias", "decoder": "lm_predictions.lm_head.decoder"}


def _layer_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def _project(w: Weights, name: str, rel: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
    weight = w.get(f"{name}.weight").astype(np.float64)
    bias = w.get(f"{name}.bias").astype(np.float64)
    return (rel @ weight.T + bias).reshape(rel.shape[0], heads, head_dim).astype(np.float32)


def map_weights(w: Weights, config, src, perm=None) -> tuple[dict, bool]:
    m, pos = config.model, config.position
    hf = src.hf_config
    head_dim = m.hidden // m.num_heads
    word = w.get("embeddings.word_embeddings.weight")
    emb = {"word": {"embedding": word[perm] if perm is not None else word},
           "norm": norm(w, "embeddings.LayerNorm")}
    if m.type_vocab_size > 0:
        emb["token_type"] = {"embedding": w.get("embeddings.token_type_embeddings.weight")}

    rel = w.get("encoder.rel_embeddings.weight").astype(np.float64)
    span = pos.bucket_size if pos.bucket_size > 0 else pos.max_position
    rel = rel[: 2 * span]
    if "layer_norm" in str(hf.get("norm_rel_ebd", "none")).lower():
        rel = _layer_norm(rel, w.get("encoder.LayerNorm.weight"), w.get("encoder.LayerNorm.bias"),
                          float(m.layer_norm_eps))
    share = bool(hf.get("share_att_key", False))
    layers = {}
    for i in range(m.num_layers):
        p = f"encoder.layer.{i}"
        layer = bert_layer(w, p, m.num_heads, head_dim, q="query_proj", k="key_proj", v="value_proj")
        hook = {}
        if pos.c2p:
            name = f"{p}.attention.self.{'key_proj' if share else 'pos_key_proj'}"
            hook["pos_key"] = _project(w, name, rel, m.num_heads, head_dim)
        if pos.p2c:
            name = f"{p}.attention.self.{'query_proj' if share else 'pos_query_proj'}"
            hook["pos_query"] = _project(w, name, rel, m.num_heads, head_dim)
        layer["hook"] = {"tree": hook}
        layers[i] = layer
    params = {"encoder": {"embeddings": emb, "layers": layers}}
    names = LEGACY_HEAD if w.has(f"{LEGACY_HEAD['dense']}.weight") else HEAD
    head = mlm_head(w, names, w.tensors["embeddings.word_embeddings.weight"])
    if head is not None:
        if perm is not None:
            head["bias"] = head["bias"][perm]
        params["lm_head"] = head
    w.mark_used([n for n in w.tensors if n.endswith("position_ids") or n.startswith("mask_predictions")])
    return params, head is not None
