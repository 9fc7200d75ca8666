"""ModernBERT (transformers' ModernBertForMaskedLM / ModernBertModel) -> posjax.

The architecture, as transformers' modeling_modernbert.py builds it:
  embeddings   tok_embeddings -> LayerNorm (no bias) -> dropout; no token types, no table
  layer i      x + Wo(attn(attn_norm(x))); x + Wo(act(in) * gate), (in, gate) = Wi(mlp_norm(x))
               attn_norm is Identity on layer 0; Wqkv is one fused [3*H*D, E] projection, q k v
               in that order; RoPE with the half-split pairing (rotate_half); no biases
  final_norm   LayerNorm after the last layer (posjax's pre-LN final norm)
  head         LayerNorm(act(dense(h))), then the decoder tied to tok_embeddings, with a bias
posjax's fields: model.post_ln=False, mlp='glu', norm/attention/mlp/head biases from norm_bias,
attention_bias, mlp_bias, classifier_bias, first_attention_norm=False, head_activation from
classifier_activation, position rope(interleaved=False, base=the global layers' rope_theta).

Local layers: layer_types (or the older global_attn_every_n_layers, default 3) name the
sliding-window layers, whose window is |i - j| <= local_attention // 2 (transformers'
sliding_window_bidirectional_overlay with sliding_window = local_attention // 2), i.e. posjax's
model.local_window = local_attention, global every k-th layer from layer 0, and their own RoPE
base (local_rope_theta) in model.local_position.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from posjax.convert.hf_activations import activation
from posjax.convert.hf_weights import Weights
from posjax.errors import ConfigError



def _int(hf: dict, key: str, default=None) -> int:
    value = hf.get(key, default)
    if value is None:
        raise ConfigError(f"config.json:{key}", None, "a value (modernbert configs define it)")
    return int(value)


def _rope_theta(hf: dict, kind: str, legacy_key: str, default: float) -> float:
    """rope_theta of one layer type; anything but plain RoPE is refused."""
    params = (hf.get("rope_parameters") or {}).get(kind) or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ConfigError(f"config.json:rope_parameters.{kind}.rope_type", rope_type,
                          "'default' (extend a converted model with .extend(..., method=) instead)")
    return float(params.get("rope_theta", hf.get(legacy_key, default)))


def layer_is_global(hf: dict, num_layers: int) -> list:
    """One bool per layer: True for full attention (transformers' layer_types, else its
    backward-compatible global_attn_every_n_layers rule `i % n == 0`)."""
    types = hf.get("layer_types")
    if types is None:
        every = _int(hf, "global_attn_every_n_layers", 3)
        if every < 1:
            raise ConfigError("config.json:global_attn_every_n_layers", every, "an int >= 1")
        return [i % every == 0 for i in range(num_layers)]
    known = ("full_attention", "sliding_attention")
    if len(types) != num_layers or any(t not in known for t in types):
        raise ConfigError("config.json:layer_types", types,
                          f"{num_layers} entries, each one of {', '.join(known)}")
    return [t == "full_attention" for t in types]


def layer_fields(hf: dict, num_layers: int) -> dict:
    """The posjax layer-layout fields of a checkpoint with local layers; {} when all global."""
    is_global = layer_is_global(hf, num_layers)
    if all(is_global):
        return {}
    for every in range(1, num_layers + 1):
        for first in (True, False):
            if is_global == [(i if first else i + 1) % every == 0 for i in range(num_layers)]:
                local = _rope_theta(hf, "sliding_attention", "local_rope_theta", 10000.0)
                return {"local_window": _int(hf, "local_attention", 128), "global_every": every,
                        "global_first": first, "local_position": {"base": local}}
    raise ConfigError("config.json:layer_types", hf.get("layer_types"),
                      "global (full_attention) on every k-th layer, from layer 0 or from k-1")


def fields(hf: dict) -> tuple[dict, dict]:
    """(posjax model fields, position fields) of a ModernBERT config.json."""
    hidden, heads = _int(hf, "hidden_size", 768), _int(hf, "num_attention_heads", 12)
    if hidden % heads:
        raise ConfigError("config.json:num_attention_heads", heads, f"a divisor of hidden_size={hidden}")
    num_layers = _int(hf, "num_hidden_layers", 22)
    dropout = max(float(hf.get(k, 0.0) or 0.0)
                  for k in ("embedding_dropout", "mlp_dropout", "attention_dropout"))
    m = {
        "vocab_size": _int(hf, "vocab_size", 50368),
        "hidden": hidden,
        "num_layers": num_layers,
        "num_heads": heads,
        "mlp_dim": _int(hf, "intermediate_size", 1152),
        "type_vocab_size": 0,
        "activation": activation(hf, "hidden_activation"),
        "head_activation": activation(hf, "classifier_activation"),
        "layer_norm_eps": float(hf.get("norm_eps", 1e-5)),
        "max_length": _int(hf, "max_position_embeddings", 8192),
        # posjax drops out after the embeddings, attention and MLP; ModernBERT's defaults are 0
        "dropout": dropout,
        "post_ln": False,
        "causal": False,
        "share_layers": False,
        "embedding_dim": None,
        "mlp": "glu",
        "norm_bias": bool(hf.get("norm_bias", False)),
        "attention_bias": bool(hf.get("attention_bias", False)),
        "mlp_bias": bool(hf.get("mlp_bias", False)),
        "head_bias": bool(hf.get("classifier_bias", False)),
        "first_attention_norm": False,
    }
    position = {"name": "rope", "interleaved": False,
                "base": _rope_theta(hf, "full_attention", "global_rope_theta", 160000.0)}
    m.update(layer_fields(hf, num_layers))
    return m, position


# -- weights ---------------------------------------------------------------------------------


def _linear(w: Weights, name: str, bias: bool, out_shape: tuple, in_shape: Optional[tuple] = None) -> dict:
    """torch Linear [out, in] -> posjax Dense kernel [*in_shape, *out_shape] (+ bias)."""
    weight = w.get(f"{name}.weight")
    in_shape = in_shape or (weight.shape[1],)
    out = {"kernel": weight.T.reshape(*in_shape, *out_shape)}
    if bias:
        out["bias"] = w.get(f"{name}.bias").reshape(out_shape)
    return out


def _norm(w: Weights, name: str, bias: bool) -> dict:
    out = {"scale": w.get(f"{name}.weight")}
    if bias:
        out["bias"] = w.get(f"{name}.bias")
    return out


def _attention(w: Weights, p: str, m) -> dict:
    """Wqkv [3*H*D, E] (rows q | k | v, each head-major) -> query/key/value [E, H, D]."""
    h, d, e = m.num_heads, m.hidden // m.num_heads, m.hidden
    fused = w.get(f"{p}.Wqkv.weight").reshape(3, h * d, e)
    bias = w.get(f"{p}.Wqkv.bias").reshape(3, h, d) if m.attention_bias else None
    out = {}
    for j, name in enumerate(("query", "key", "value")):
        out[name] = {"kernel": fused[j].T.reshape(e, h, d)}
        if bias is not None:
            out[name]["bias"] = bias[j]
    out["out"] = _linear(w, f"{p}.Wo", m.attention_bias, (e,), (h, d))
    return out


def map_weights(w: Weights, config, src, perm=None) -> tuple[dict, bool]:
    """posjax params (pure dict) of a ModernBERT checkpoint; second value: MLM head found."""
    m = config.model
    word = w.get("embeddings.tok_embeddings.weight")
    emb = {"word": {"embedding": word[perm] if perm is not None else word},
           "norm": _norm(w, "embeddings.norm", m.norm_bias)}
    layers = {}
    for i in range(m.num_layers):
        p = f"layers.{i}"
        layer = {"attention": _attention(w, f"{p}.attn", m),
                 "mlp": {"wi": _linear(w, f"{p}.mlp.Wi", m.mlp_bias, (2, m.mlp_dim)),
                         "wo": _linear(w, f"{p}.mlp.Wo", m.mlp_bias, (m.hidden,))},
                 "mlp_norm": _norm(w, f"{p}.mlp_norm", m.norm_bias)}
        if i > 0:  # layer 0's attn_norm is nn.Identity: no tensors
            layer["attention_norm"] = _norm(w, f"{p}.attn_norm", m.norm_bias)
        layers[i] = layer
    params = {"encoder": {"embeddings": emb, "layers": layers,
                          "final_norm": _norm(w, "final_norm", m.norm_bias)}}
    if not w.has("head.dense.weight"):
        return params, False
    if w.has("decoder.weight"):  # saved only when untied (tie_word_embeddings=False)
        table = w.get("decoder.weight")
        if table.shape != word.shape or not np.allclose(table, word, atol=1e-6):
            raise ConfigError("checkpoint tensor", "decoder.weight",
                              "equal to the word embeddings (posjax ties the MLM output projection)")
    bias = w.get("decoder.bias") if w.has("decoder.bias") else np.zeros(word.shape[0], np.float32)
    params["lm_head"] = {"transform": _linear(w, "head.dense", m.head_bias, (m.hidden,)),
                         "norm": _norm(w, "head.norm", m.norm_bias),
                         "bias": bias[perm] if perm is not None else bias}
    return params, True
