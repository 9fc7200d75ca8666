"""NomicBERT (transformers' NomicBertForMaskedLM, model_type 'nomic_bert') -> posjax.

The architecture, as transformers' modeling_nomic_bert.py builds it:
  embeddings   word + token type -> LayerNorm -> dropout (no position table: BERT's layout)
  layer        post-LN: LN(x + o_proj(attn(x))), LN(x + down(act(gate(x)) * up(x)));
               q/k/v/o and the MLP without biases, the norms with them; RoPE with the
               half-split pairing (rotate_half), theta from rope_parameters (default 1000)
  head         BERT's cls.predictions: LN(act(dense(h))) then the tied decoder + bias
posjax's fields: post_ln=True, mlp='glu' (SwiGLU with hidden_act 'silu'; posjax's input half is
gate_proj, its gate half up_proj), attention_bias=mlp_bias=False, head_dim from config.json.

Weights: transformers saves (and the Hub holds) the original layout, which it renames on
load (conversion_mapping.py 'nomic_bert'): emb_ln = embeddings.LayerNorm, encoder.layers.i =
layers.i, attn.Wqkv = q | k | v stacked on the output axis, attn.out_proj = o_proj,
fc11 = up_proj, fc12 = gate_proj (the activated one), fc2 = down_proj, norm1 / norm2 = the post-
attention / post-MLP norms. Both layouts are read.

Only transformers' own config layout converts; the older remote-code checkpoints of
nomic-ai/nomic-embed-text-v1* name their fields differently (n_embd, rotary_emb_base, ...)
and are refused by the missing hidden_size.
"""

from __future__ import annotations

import numpy as np

from posjax.convert.hf_weights import Weights, mlm_head, norm
from posjax.errors import ConfigError

HEAD = {"dense": "cls.predictions.transform.dense",
        "norm": "cls.predictions.transform.layer_norm",
        "bias": "cls.predictions.bias", "decoder": "cls.predictions.decoder"}


def fields(hf: dict, m: dict) -> dict:
    """Adjust the BERT-family model fields `m` in place; returns the position fields."""
    params = hf.get("rope_parameters") or {}
    rope_type = params.get("rope_type", "default")
    if rope_type != "default":
        raise ConfigError("config.json:rope_parameters.rope_type", rope_type,
                          "'default' (extend a converted model with .extend(..., method=) instead)")
    head_dim = hf.get("head_dim")
    if head_dim is not None and int(head_dim) != m["hidden"] // m["num_heads"]:
        m["head_dim"] = int(head_dim)
    m.update(mlp="glu", attention_bias=False, mlp_bias=False)
    return {"name": "rope", "interleaved": False,
            "base": float(params.get("rope_theta", hf.get("rope_theta", 1000.0)))}


def _projection(w: Weights, name: str, shape: tuple) -> dict:
    """Bias-free torch Linear [out, in] -> posjax kernel of `shape` (in axes first)."""
    return {"kernel": w.get(f"{name}.weight").T.reshape(shape)}


def map_weights(w: Weights, config, src, perm=None) -> tuple[dict, bool]:
    m = config.model
    h = m.num_heads
    d = m.head_dim or m.hidden // h
    e, f = m.hidden, m.mlp_dim
    word = w.get("embeddings.word_embeddings.weight")
    original = w.has("emb_ln.weight")  # the saved / Hub layout, else transformers' names
    emb = {"word": {"embedding": word[perm] if perm is not None else word},
           "norm": norm(w, "emb_ln" if original else "embeddings.LayerNorm")}
    if m.type_vocab_size > 0:
        emb["token_type"] = {"embedding": w.get("embeddings.token_type_embeddings.weight")}
    names = (dict(attn="attn", o="out_proj", up="fc11", gate="fc12", down="fc2",
                  norm1="norm1", norm2="norm2") if original else
             dict(attn="self_attn", o="o_proj", up="up_proj", gate="gate_proj", down="down_proj",
                  norm1="post_attention_layernorm", norm2="post_mlp_layernorm"))
    layers = {}
    for i in range(m.num_layers):
        p = f"encoder.layers.{i}" if original else f"layers.{i}"
        a = f"{p}.{names['attn']}"
        if original:
            q, k, v = np.split(w.get(f"{a}.Wqkv.weight"), 3, axis=0)
        else:
            q, k, v = (w.get(f"{a}.{x}_proj.weight") for x in "qkv")
        gate = w.get(f"{p}.mlp.{names['gate']}.weight").T  # [E, F]: the activated half
        up = w.get(f"{p}.mlp.{names['up']}.weight").T
        layers[i] = {
            "attention": {"query": {"kernel": q.T.reshape(e, h, d)},
                          "key": {"kernel": k.T.reshape(e, h, d)},
                          "value": {"kernel": v.T.reshape(e, h, d)},
                          "out": _projection(w, f"{a}.{names['o']}", (h, d, e))},
            "attention_norm": norm(w, f"{p}.{names['norm1']}"),
            "mlp": {"wi": {"kernel": np.stack([gate, up], axis=1)},
                    "wo": _projection(w, f"{p}.mlp.{names['down']}", (f, e))},
            "mlp_norm": norm(w, f"{p}.{names['norm2']}"),
        }
    params = {"encoder": {"embeddings": emb, "layers": layers}}
    head = mlm_head(w, HEAD, word)
    if head is not None:
        if perm is not None:
            head["bias"] = head["bias"][perm]
        params["lm_head"] = head
    return params, head is not None
