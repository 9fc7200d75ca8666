"""JinaBERT (jinaai/jina-bert-implementation: model_type 'bert' with position_embedding_type
'alibi') -> posjax: BERT's post-LN layout with symmetric ALiBi and a gated MLP.

  embeddings   word + token type -> LayerNorm (no position table)
  attention    BERT's (biases, post-LN), plus -slope_h * |i - j| on the logits: posjax's
               alibi scheme, whose slopes are the same get_slopes
  mlp          encoder.layer.i.mlp.gated_layers [2F, E] (no bias; the first F rows are
               activated, GELU for feed_forward_type 'geglu', ReLU for 'reglu'), mlp.wo,
               mlp.layernorm(wo(.) + x): posjax's mlp='glu' with a ZERO wi bias (exact; posjax
               has one bias flag for both MLP projections and JinaBERT's wo has a bias)
  head         BERT's cls.predictions
The torch reference the parity test runs is tests/convert/jinabert_reference.py.
"""

from __future__ import annotations

import numpy as np

from posjax.convert.bert import BERT_HEAD, IGNORED_SUFFIXES, embeddings
from posjax.convert.hf_weights import Weights, dense, heads_in, heads_out, mlm_head, norm
from posjax.errors import ConfigError

ACTIVATIONS = {"geglu": "gelu", "reglu": "relu"}


def fields(hf: dict, m: dict) -> dict:
    """Adjust the BERT model fields `m` in place; returns the position fields."""
    kind = hf.get("feed_forward_type", "original")
    if kind not in ACTIVATIONS:
        raise ConfigError("config.json:feed_forward_type", kind,
                          f"one of {', '.join(ACTIVATIONS)} (JinaBERT's gated MLPs)")
    m.update(mlp="glu", activation=ACTIVATIONS[kind])
    return {"name": "alibi", "symmetric": True}


def map_weights(w: Weights, config, src, perm=None) -> tuple[dict, bool]:
    m = config.model
    d = m.hidden // m.num_heads
    layers = {}
    for i in range(m.num_layers):
        p = f"encoder.layer.{i}"
        gated = w.get(f"{p}.mlp.gated_layers.weight")  # [2F, E]
        layers[i] = {
            "attention": {"query": heads_in(w, f"{p}.attention.self.query", m.num_heads, d),
                          "key": heads_in(w, f"{p}.attention.self.key", m.num_heads, d),
                          "value": heads_in(w, f"{p}.attention.self.value", m.num_heads, d),
                          "out": heads_out(w, f"{p}.attention.output.dense", m.num_heads, d)},
            "attention_norm": norm(w, f"{p}.attention.output.LayerNorm"),
            "mlp": {"wi": {"kernel": gated.T.reshape(m.hidden, 2, m.mlp_dim),
                           "bias": np.zeros((2, m.mlp_dim), np.float32)},
                    "wo": dense(w, f"{p}.mlp.wo")},
            "mlp_norm": norm(w, f"{p}.mlp.layernorm"),
        }
    params = {"encoder": {"embeddings": embeddings(w, config, src, perm), "layers": layers}}
    head = mlm_head(w, BERT_HEAD, w.tensors["embeddings.word_embeddings.weight"])
    if head is not None:
        if perm is not None:
            head["bias"] = head["bias"][perm]
        params["lm_head"] = head
    w.mark_used([n for n in w.tensors if n.endswith(IGNORED_SUFFIXES + ("alibi",))])
    return params, head is not None
