"""Hugging Face `config.json` -> a posjax config (posjax.config.defaults layout) plus conversion facts.

One function per architecture family decides the posjax model and position fields; everything
posjax cannot reproduce exactly is refused here with ConfigError, before a single weight is
read, naming the HF field, its value and what posjax accepts.

Supported `model_type`s:
  bert, roberta      learned absolute table (RoBERTa: rows from padding_idx + 1 on); a bert
                     config with position_embedding_type 'alibi' is JinaBERT
                     (posjax/convert/jinabert.py)
  albert             factorized embeddings + one shared layer (num_hidden_groups = 1,
                     inner_group_num = 1)
  roformer           RoPE, interleaved pairing (HF RoFormer's sin/cos layout, see roformer notes
                     in posjax/convert/bert.py)
  nezha              fixed sinusoid relative keys + values (transformers 4.x deprecated/nezha)
  deberta-v2         disentangled c2p/p2c attention with log buckets, relative_attention=True,
                     position_biased_input=False, no conv layer (DeBERTa-v3 checkpoints)
  modernbert         pre-LN, GeGLU, bias-free, half-split RoPE per layer type
                     (posjax/convert/modernbert.py)
  nomic_bert         post-LN, SwiGLU, bias-free projections, half-split RoPE
                     (posjax/convert/nomic.py)
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import ml_collections

from posjax.config import defaults
from posjax.convert import jinabert, modernbert, nomic
from posjax.convert.hf_activations import activation
from posjax.errors import ConfigError

SUPPORTED = ("bert", "roberta", "albert", "roformer", "nezha", "deberta-v2", "modernbert",
             "nomic-bert")

@dataclasses.dataclass
class Source:
    """What the converter must know about the HF model beyond the posjax config."""

    model_type: str  # normalized: one of SUPPORTED, or 'jinabert' (a bert config with ALiBi)
    prefix: str  # base-model prefix in the state dict ('bert.', 'roberta.', ...)
    position_offset: int = 0  # RoBERTa: rows of the HF table before position 0 (padding_idx+1)
    position_ids: str = "arange"  # 'arange' | 'roberta' (cumsum of the mask, HF semantics)
    fold_token_type: bool = False  # type_vocab_size == 1: row 0 is folded into the positions
    hf_config: Optional[dict] = None


def read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ConfigError("--hf", os.path.dirname(path) or ".",
                          f"a Hugging Face model directory holding config.json (no {path})") from None
    except json.JSONDecodeError as e:
        raise ConfigError("config.json", path, f"valid JSON ({e.msg} at line {e.lineno})") from None


def _need(hf: dict, key: str, model_type: str):
    if key not in hf or hf[key] is None:
        raise ConfigError(f"config.json:{key}", None, f"a value ({model_type} configs define it)")
    return hf[key]


def normalize_model_type(hf: dict) -> str:
    model_type = hf.get("model_type")
    if model_type is None:
        archs = hf.get("architectures") or []
        raise ConfigError("config.json:model_type", None,
                          f"one of {', '.join(SUPPORTED)} (architectures={archs})")
    model_type = str(model_type).replace("_", "-").lower()
    if model_type not in SUPPORTED:
        raise ConfigError("config.json:model_type", hf.get("model_type"),
                          f"one of {', '.join(SUPPORTED)}")
    return model_type


def _base_model(hf: dict, model_type: str) -> dict:
    """Fields shared by every BERT-family encoder."""
    return {
        "vocab_size": int(_need(hf, "vocab_size", model_type)),
        "hidden": int(_need(hf, "hidden_size", model_type)),
        "num_layers": int(_need(hf, "num_hidden_layers", model_type)),
        "num_heads": int(_need(hf, "num_attention_heads", model_type)),
        "mlp_dim": int(_need(hf, "intermediate_size", model_type)),
        "type_vocab_size": int(hf.get("type_vocab_size", 2)),
        "activation": activation(hf),
        "layer_norm_eps": float(hf.get("layer_norm_eps", 1e-12)),
        "max_length": int(hf.get("max_position_embeddings", 512)),
        "dropout": float(hf.get("hidden_dropout_prob", 0.1)),
        "post_ln": True,
        "causal": False,
        "share_layers": False,
        "embedding_dim": None,
    }


def _embedding_size(hf: dict, hidden: int, model_type: str) -> Optional[int]:
    e = hf.get("embedding_size")
    if e is None or int(e) == hidden:
        return None
    if int(e) > hidden:
        raise ConfigError("config.json:embedding_size", e,
                          f"<= hidden_size={hidden} ({model_type}: posjax factorizes E < hidden)")
    return int(e)


def posjax_fields(hf: dict) -> tuple[dict, dict, Source]:
    """(model fields, position fields, Source) for a HF config dict; ConfigError if unsupported."""
    model_type = normalize_model_type(hf)
    if model_type == "modernbert":  # a different config vocabulary altogether
        m, position = modernbert.fields(hf)
        return m, position, Source(model_type=model_type, prefix="model.", hf_config=hf)
    m = _base_model(hf, model_type)
    prefix = {"deberta-v2": "deberta.", "nomic-bert": "nomic_bert."}.get(model_type,
                                                                        f"{model_type}.")
    src = Source(model_type=model_type, prefix=prefix, hf_config=hf)

    if model_type == "bert" and hf.get("position_embedding_type") == "alibi":
        src.model_type = "jinabert"  # JinaBERT: a BERT config with remote code
        position = jinabert.fields(hf, m)
    elif model_type in ("bert", "roberta"):
        kind = hf.get("position_embedding_type", "absolute")
        if kind != "absolute":
            raise ConfigError("config.json:position_embedding_type", kind,
                              "'absolute' (BERT's relative_key variants are not converted)")
        position = {"name": "learned"}
        if model_type == "roberta":
            # HF RoBERTa numbers real tokens padding_idx+1, padding_idx+2, ...: the first
            # padding_idx+1 rows of its table are never used for real tokens. Dropping them
            # gives an ordinary table indexed from 0.
            offset = int(hf.get("pad_token_id", 1)) + 1
            src.position_offset = offset
            src.position_ids = "roberta"
            m["max_length"] -= offset
            if m["max_length"] < 1:
                raise ConfigError("config.json:max_position_embeddings",
                                  hf.get("max_position_embeddings"), f"> pad_token_id + 1 = {offset}")
    elif model_type == "albert":
        for key in ("num_hidden_groups", "inner_group_num"):
            if int(hf.get(key, 1)) != 1:
                raise ConfigError(f"config.json:{key}", hf.get(key),
                                  "1 (posjax shares ONE layer across all layers, as ALBERT-base..xxlarge)")
        m["share_layers"] = True
        m["embedding_dim"] = _embedding_size(hf, m["hidden"], model_type)
        position = {"name": "learned"}
        kind = hf.get("position_embedding_type", "absolute")
        if kind != "absolute":
            raise ConfigError("config.json:position_embedding_type", kind, "'absolute'")
    elif model_type == "roformer":
        if hf.get("rotary_value", False):
            raise ConfigError("config.json:rotary_value", True,
                              "False (posjax rotates queries and keys only)")
        m["embedding_dim"] = _embedding_size(hf, m["hidden"], model_type)
        # HF RoFormer: theta_i = 10000^(-2i/d), pairs (x0,x1),(x2,x3)...: interleaved RoPE.
        position = {"name": "rope", "interleaved": True, "base": 10000.0}
    elif model_type == "nomic-bert":
        position = nomic.fields(hf, m)
    elif model_type == "nezha":
        position = {"name": "nezha", "max_relative_position": int(hf.get("max_relative_position", 64))}
    else:  # deberta-v2
        position = _deberta_position(hf, m)
        m["embedding_dim"] = None
        m["type_vocab_size"] = int(hf.get("type_vocab_size", 0))
        m["layer_norm_eps"] = float(hf.get("layer_norm_eps", 1e-7))

    if m["type_vocab_size"] == 1 and position["name"] == "learned":
        # One token type is a constant vector: fold it into the position table (exact for the
        # learned table AND for its hierarchical extension, whose rows are affine in the
        # table with weights summing to 1), so inputs never need token_type_ids.
        src.fold_token_type = True
        m["type_vocab_size"] = 0
    return m, position, src


def _deberta_position(hf: dict, m: dict) -> dict:
    if not hf.get("relative_attention", False):
        raise ConfigError("config.json:relative_attention", hf.get("relative_attention", False),
                          "True (DeBERTa-v2/v3 with disentangled attention)")
    if hf.get("position_biased_input", True):
        raise ConfigError("config.json:position_biased_input", hf.get("position_biased_input", True),
                          "False (a posjax model has one position scheme; DeBERTa-v3 uses False)")
    if int(hf.get("conv_kernel_size", 0) or 0) > 0:
        raise ConfigError("config.json:conv_kernel_size", hf.get("conv_kernel_size"),
                          "0 (the DeBERTa-v2-xlarge convolution layer is not in the posjax encoder)")
    e = hf.get("embedding_size")
    if e is not None and int(e) != m["hidden"]:
        raise ConfigError("config.json:embedding_size", e,
                          f"hidden_size={m['hidden']} (DeBERTa projects BEFORE its LayerNorm; "
                          "posjax's factorized embeddings project after)")
    norm = hf.get("norm_rel_ebd", "none")
    kinds = [x.strip() for x in str(norm).lower().split("|")]
    if not set(kinds) <= {"none", "layer_norm"}:
        raise ConfigError("config.json:norm_rel_ebd", norm, "'none' or 'layer_norm'")
    att = hf.get("pos_att_type") or []
    if isinstance(att, str):
        att = [x.strip() for x in att.lower().split("|")]
    att = [str(x).lower() for x in att]
    if not set(att) <= {"c2p", "p2c"} or not att:
        raise ConfigError("config.json:pos_att_type", hf.get("pos_att_type"),
                          "a non-empty subset of ['c2p', 'p2c']")
    max_rel = int(hf.get("max_relative_positions", -1))
    if max_rel < 1:
        max_rel = m["max_length"]
    buckets = int(hf.get("position_buckets", -1))
    return {"name": "deberta", "c2p": "c2p" in att, "p2c": "p2c" in att,
            "bucket_size": max(buckets, 0), "max_position": max_rel}


def posjax_config(hf: dict, *, vocab_size: Optional[int] = None) -> tuple[ml_collections.ConfigDict, Source]:
    """A complete posjax config (posjax.config.defaults + the HF model) and the Source.

    data.seq_len is the HF model's position count (what evaluation calls the trained length);
    data.tokenizer is 'wordpiece' (a HF vocab.txt, reordered by the converter, loads as one).
    """
    model, position, src = posjax_fields(hf)
    if vocab_size is not None:
        model["vocab_size"] = int(vocab_size)
    config = defaults.get_config()
    with config.unlocked():
        for key, value in model.items():
            config.model[key] = value
        config.position = ml_collections.ConfigDict(position)
        config.model.attention = "auto"
        config.model.dtype = "float32"
        config.data.tokenizer = "wordpiece"
        config.data.corpus = "kjv"
        config.data.vocab_size = model["vocab_size"]
        config.data.seq_len = model["max_length"]
        # Fine-tuning defaults: a converted model continues pretraining, it does not start it.
        config.train.learning_rate = 5e-5
        config.train.warmup_steps = 0
    return config, src
