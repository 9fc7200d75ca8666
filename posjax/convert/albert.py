"""ALBERT: factorized embeddings (E < hidden) and one layer shared by all layers.

HF layout (albert. prefix):
  embeddings.{word,position,token_type}_embeddings [*, E], embeddings.LayerNorm [E]
  encoder.embedding_hidden_mapping_in  Linear(E -> hidden)     posjax embeddings.project
  encoder.albert_layer_groups.0.albert_layers.0.
      attention.{query,key,value,dense,LayerNorm}             attention + attention_norm
      ffn, ffn_output, full_layer_layer_norm                  mlp.wi, mlp.wo, mlp_norm
  predictions.{dense (hidden -> E), LayerNorm [E], decoder (tied), bias}  lm_head
  pooler + sop_classifier.classifier                          sop_head (when present)
Both stacks are post-LN with the same residual order, and ALBERT's LayerNorm-then-project
matches posjax's factorized Embeddings.
"""

from __future__ import annotations

from posjax import schema
from posjax.convert.hf_weights import Weights, dense, heads_in, heads_out, mlm_head, norm

HEAD = {"dense": "predictions.dense", "norm": "predictions.LayerNorm", "bias": "predictions.bias",
        "decoder": "predictions.decoder"}
LAYER = "encoder.albert_layer_groups.0.albert_layers.0"


def map_weights(w: Weights, config, src, perm=None) -> tuple[dict, bool]:
    m = config.model
    head_dim = m.hidden // m.num_heads
    word = w.get("embeddings.word_embeddings.weight")
    table = w.get("embeddings.position_embeddings.weight")[: m.max_length]
    emb = {"word": {"embedding": word[perm] if perm is not None else word},
           "norm": norm(w, "embeddings.LayerNorm"),
           "project": dense(w, "encoder.embedding_hidden_mapping_in")}
    type_table = w.get("embeddings.token_type_embeddings.weight")
    if m.type_vocab_size > 0:
        emb["token_type"] = {"embedding": type_table}
    elif src.fold_token_type:
        table = table + type_table[0]
    emb["position"] = {"tree": {"table": table}}
    a = f"{LAYER}.attention"
    layer = {
        "attention": {
            "query": heads_in(w, f"{a}.query", m.num_heads, head_dim),
            "key": heads_in(w, f"{a}.key", m.num_heads, head_dim),
            "value": heads_in(w, f"{a}.value", m.num_heads, head_dim),
            "out": heads_out(w, f"{a}.dense", m.num_heads, head_dim),
        },
        "attention_norm": norm(w, f"{a}.LayerNorm"),
        "mlp": {"wi": dense(w, f"{LAYER}.ffn"), "wo": dense(w, f"{LAYER}.ffn_output")},
        "mlp_norm": norm(w, f"{LAYER}.full_layer_layer_norm"),
    }
    params = {"encoder": {"embeddings": emb, "layers": {0: layer}}}
    head = mlm_head(w, HEAD, w.tensors["embeddings.word_embeddings.weight"])
    if head is not None:
        if perm is not None:
            head["bias"] = head["bias"][perm]
        params["lm_head"] = head
    if schema.view(config).model.sop:
        params["sop_head"] = {"pooler": dense(w, "pooler"),
                              "classifier": dense(w, "sop_classifier.classifier")}
    w.mark_used([n for n in w.tensors if n.endswith("position_ids")])
    return params, head is not None


def has_sop(w: Weights) -> bool:
    return w.has("sop_classifier.classifier.weight") and w.has("pooler.weight")
