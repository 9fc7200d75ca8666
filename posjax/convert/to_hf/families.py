"""posjax config -> Hugging Face config.json, per exportable family, checked by re-import.

Every writer here is the inverse of the import in posjax/convert/hf_config.py (and
modernbert.fields). It is not trusted on its own: `check_round_trip` reads the written
config back with that import and compares every model and position field with the posjax
model's, so a field a family cannot express (a pre-LN BERT, a RoFormer with another RoPE
base, a bias the HF model lacks, ...) is refused with the field, its value and the one value
the family writes, before any file is written.

Positions:
  learned-table schemes (learned, hierarchical, and any other that adds rows of a table)
      exported as a plain table of model.max_length rows (max_position_embeddings = that)
  rope  RoFormer: interleaved pairs, base 10000, no scaling (transformers' RoFormer has none)
        ModernBERT: half-split pairs; a scaling goes into rope_parameters.full_attention
        (transformers 5's per-layer-type field; the local layers keep plain RoPE, as
        posjax's extend leaves them, see layout.keep_local_rotation). transformers' dynamic
        RoPE reads the pretraining length from max_position_embeddings (written as that) and
        keeps the frequencies of the longest input it has seen until one is shorter than
        that length (modeling_rope_utils.dynamic_rope_update); posjax computes them per
        input, so the two agree on inputs at least as long as every earlier one, and on
        inputs shorter than the pretraining length.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import ml_collections

from posjax import positions, schema
from posjax.convert.core import SPECIALS
from posjax.convert.hf_activations import ACTIVATIONS
from posjax.convert.hf_config import posjax_config
from posjax.errors import ConfigError
from posjax.models import layout
from posjax.positions.absolute import Learned
from posjax.positions.rope_scaling import ntk_base
from posjax.positions.rotary import Rope

FAMILIES = ("bert", "roberta", "roformer", "modernbert")
# The posjax RoPE fields that describe a length scaling; the rest (base, pairing, rotated
# dims) is the plain rotation the import reads back.
SCALING_FIELDS = ("scaling", "factor", "original_length", "beta_fast", "beta_slow",
                  "attention_factor", "low_freq_factor", "high_freq_factor", "short_factor",
                  "long_factor")
# Model fields that choose how posjax runs, not what it computes (and the SOP head, which no
# exportable family has).
EXECUTION_FIELDS = ("attention", "block_q", "block_k", "dtype", "sop")
# HF token-id fields copied from the original config.json when the workdir recorded it.
TOKEN_ID_FIELDS = ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id",
                   "sep_token_id")
# posjax activation -> the first HF hidden_act that the import maps to it.
HF_ACTIVATION = {ours: hf for hf, ours in reversed(list(ACTIVATIONS.items()))}


def table_schemes() -> list[str]:
    """Position names whose vectors are rows of a learned table added to the embeddings:
    each is exported as a plain table."""
    return [n for n in positions.names()
            if issubclass(positions.scheme_class(n), Learned)
            and positions.scheme_class(n).embed is Learned.embed]


# Schemes a transformers family once expressed, and why none does now.
NO_FAMILY = {"nezha": "transformers 5 has no NEZHA (4.x had the one family with its relative "
                      "keys and values)"}


def exportable_positions(name: Optional[str] = None) -> str:
    """What --to_hf takes, and for a scheme `name` it refuses, how to get an exportable model."""
    why = f"; {NO_FAMILY[name]}" if name in NO_FAMILY else ""
    return (f"one of {', '.join(table_schemes())} (BERT, RoBERTa) or rope (RoFormer, "
            f"ModernBERT): the position schemes transformers' BERT-family models express{why}; "
            "to export, train with configs/roformer.py (RoPE) or configs/bert.py (a learned "
            "table)")


def family_of(config, metadata: dict) -> str:
    """The HF family a workdir exports to: its model_type when converted from HF, else the
    one its architecture reads as (post-LN + table: bert, post-LN + interleaved RoPE:
    roformer, pre-LN + RoPE: modernbert)."""
    name = config.position.name
    is_table, is_rope = name in table_schemes(), name == "rope"
    if not (is_table or is_rope):
        raise ConfigError("position.name", name, exportable_positions(name))
    model_type = metadata.get("model_type")
    if model_type is not None:
        if model_type not in FAMILIES:
            raise ConfigError("model_type (convert.json)", model_type,
                              f"one of {', '.join(FAMILIES)} (the families --to_hf writes)")
        return model_type
    if is_table:
        return "bert"
    if bool(config.model.post_ln):
        return "roformer"
    return "modernbert"


def plain_position(position) -> dict:
    """The position fields without a RoPE scaling (that part goes to rope_parameters)."""
    return {k: v for k, v in dict(position).items() if k not in SCALING_FIELDS}


def plain_config(config):
    """The posjax model the HF files describe before any RoPE scaling: a learned-table scheme
    becomes a plain table of model.max_length rows; RoPE loses its scaling fields."""
    plain = ml_collections.ConfigDict(config.to_dict())
    name = config.position.name
    if name in table_schemes():
        plain.position = ml_collections.ConfigDict({"name": "learned"})
    elif name == "rope":
        plain.position = ml_collections.ConfigDict(plain_position(config.position.to_dict()))
    return plain


def token_ids(metadata: dict, vocab_to_hf) -> dict:
    """pad/bos/eos/cls/sep ids: the original config.json's, else posjax's specials ([PAD]
    [UNK] [CLS] [SEP] [MASK] = ids 0..4) in HF order."""
    original = metadata.get("hf_config") or {}
    ids = {k: original[k] for k in TOKEN_ID_FIELDS if original.get(k) is not None}
    if ids:
        return ids
    pad, cls, sep = (int(vocab_to_hf(SPECIALS.index(t))) for t in ("[PAD]", "[CLS]", "[SEP]"))
    return {"pad_token_id": pad, "bos_token_id": cls, "eos_token_id": sep, "cls_token_id": cls,
            "sep_token_id": sep}


def _bert_family(model_type: str, m, ids: dict) -> dict:
    hf = {
        "vocab_size": int(m.vocab_size),
        "hidden_size": int(m.hidden),
        "num_hidden_layers": int(m.num_layers),
        "num_attention_heads": int(m.num_heads),
        "intermediate_size": int(m.mlp_dim),
        "hidden_act": HF_ACTIVATION[m.activation],
        "layer_norm_eps": float(m.layer_norm_eps),
        "hidden_dropout_prob": float(m.dropout),
        "attention_probs_dropout_prob": float(m.dropout),
        # posjax's 0 token types is HF's 1 with a zero row (the import folds it back)
        "type_vocab_size": max(int(m.type_vocab_size), 1),
        "max_position_embeddings": int(m.max_length),
        "pad_token_id": ids.get("pad_token_id", 0),
    }
    if model_type == "roberta":
        # HF RoBERTa numbers real tokens from pad_token_id + 1 (see hf_config.posjax_fields)
        hf["pad_token_id"] = ids.get("pad_token_id", 1)
        hf["max_position_embeddings"] += hf["pad_token_id"] + 1
        hf.update({k: v for k, v in ids.items() if k in ("bos_token_id", "eos_token_id")})
    if model_type == "roformer":
        hf["embedding_size"] = int(m.embedding_dim or m.hidden)
        hf["rotary_value"] = False
    else:
        hf["position_embedding_type"] = "absolute"
    return hf


def _modernbert(m, position, ids: dict) -> dict:
    m = schema.section_view(m, "model")
    kinds = layout.plan(int(m.num_layers), int(m.max_length), window=m.local_window,
                        global_every=int(m.global_every), global_first=bool(m.global_first))
    local_base = dict(m.local_position or {}).get("base", position.base)
    return {
        "vocab_size": int(m.vocab_size),
        "hidden_size": int(m.hidden),
        "num_hidden_layers": int(m.num_layers),
        "num_attention_heads": int(m.num_heads),
        "intermediate_size": int(m.mlp_dim),
        "hidden_activation": HF_ACTIVATION[m.activation],
        "classifier_activation": HF_ACTIVATION[m.head_activation or m.activation],
        "norm_eps": float(m.layer_norm_eps),
        "max_position_embeddings": int(m.max_length),
        "norm_bias": bool(m.norm_bias),
        "attention_bias": bool(m.attention_bias),
        "mlp_bias": bool(m.mlp_bias),
        "classifier_bias": bool(m.head_bias),
        "decoder_bias": True,  # posjax's MLM head always has its output bias
        "embedding_dropout": float(m.dropout),
        "mlp_dropout": float(m.dropout),
        "attention_dropout": float(m.dropout),
        "layer_types": ["sliding_attention" if k.local else "full_attention" for k in kinds],
        "local_attention": int(m.local_window or 128),
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": float(position.base)},
            "sliding_attention": {"rope_type": "default", "rope_theta": float(local_base)},
        },
        **ids,
    }


def hf_fields(family: str, plain, ids: dict) -> dict:
    """config.json fields of `plain` (a plain_config) for `family`."""
    if family == "modernbert":
        fields = _modernbert(plain.model, plain.position, ids)
    else:
        fields = _bert_family(family, plain.model, ids)
    fields["model_type"] = family
    fields["tie_word_embeddings"] = True  # posjax ties the MLM output projection
    return fields


# -- the check --------------------------------------------------------------------------------


def _model_value(m, key: str):
    """A model field with its None defaults resolved (head_dim, head_activation)."""
    value = m.get(key)
    if key == "head_dim" and value is None:
        return int(m.hidden) // int(m.num_heads)
    if key == "head_activation" and value is None:
        return m.activation
    if isinstance(value, ml_collections.ConfigDict):
        return value.to_dict()
    return value


def _scheme(position: dict):
    return positions.make(plain_position(position))


def _local_position(config) -> Optional[dict]:
    """The position fields of the local layers (None when every layer is global)."""
    m = schema.view(config).model
    if m.local_window is None:
        return None
    return dict(config.position.to_dict(), **dict(m.local_position or {}))


def check_round_trip(plain, hf: dict, family: str) -> None:
    """ConfigError unless importing `hf` gives back `plain`'s model and position."""
    back, _ = posjax_config(dict(hf))
    why = f"(the value transformers' {family} config.json expresses)"
    for key in sorted(set(plain.model) | set(back.model)):
        if key in EXECUTION_FIELDS or key == "local_position":
            continue
        ours, theirs = _model_value(plain.model, key), _model_value(back.model, key)
        if ours != theirs:
            raise ConfigError(f"model.{key}", ours, f"{theirs!r} {why}")
    ours, theirs = _scheme(plain.position.to_dict()), _scheme(back.position.to_dict())
    if ours != theirs:
        for f in dataclasses.fields(ours):
            if getattr(ours, f.name) != getattr(theirs, f.name):
                raise ConfigError(f"position.{f.name}", getattr(ours, f.name),
                                  f"{getattr(theirs, f.name)!r} {why}")
        raise ConfigError("position.name", ours.name, f"{theirs.name!r} {why}")
    ours, theirs = _local_position(plain), _local_position(back)
    if (ours and _scheme(ours)) != (theirs and _scheme(theirs)):
        raise ConfigError("model.local_position", schema.view(plain).model.local_position.to_dict(),
                          f"{schema.view(back).model.local_position.to_dict()!r} {why}")


# -- RoPE scaling -----------------------------------------------------------------------------

# posjax scaling -> transformers rope_type (ModernBERT's rope_parameters)
HF_ROPE_TYPES = {"linear": "linear", "dynamic_ntk": "dynamic", "yarn": "yarn", "llama3": "llama3"}
EXPORTED_SCALINGS = ("none", "ntk", *HF_ROPE_TYPES)


def rope_parameters(position, head_dim: int) -> tuple[dict, Optional[int]]:
    """(transformers rope parameters of the global layers, max_position_embeddings to write
    instead of the model's, or None) for a posjax RoPE with a scaling."""
    scheme = Rope(**{k: v for k, v in position.items() if k != "name"})
    base, s = float(scheme.base), float(scheme.factor)
    if scheme.scaling == "none":
        return {"rope_type": "default", "rope_theta": base}, None
    if scheme.scaling == "ntk":  # a fixed NTK scaling is plain RoPE with a larger base
        return {"rope_type": "default",
                "rope_theta": ntk_base(base, s, scheme.rotary_size(head_dim))}, None
    if scheme.scaling not in HF_ROPE_TYPES:
        raise ConfigError("position.scaling", scheme.scaling,
                          f"one of {', '.join(EXPORTED_SCALINGS)} (what --to_hf writes into "
                          "transformers' ModernBERT rope_parameters)")
    out = {"rope_type": HF_ROPE_TYPES[scheme.scaling], "rope_theta": base, "factor": s}
    if scheme.scaling == "dynamic_ntk":
        # transformers' dynamic RoPE takes the pretraining length from max_position_embeddings
        return out, int(scheme.original_length)
    if scheme.scaling in ("yarn", "llama3"):
        out["original_max_position_embeddings"] = int(scheme.original_length)
    if scheme.scaling == "yarn":
        out.update(beta_fast=float(scheme.beta_fast), beta_slow=float(scheme.beta_slow))
        if scheme.attention_factor is not None:
            out["attention_factor"] = float(scheme.attention_factor)
    if scheme.scaling == "llama3":
        out.update(low_freq_factor=float(scheme.low_freq_factor),
                   high_freq_factor=float(scheme.high_freq_factor))
    return out, None


def with_scaling(family: str, hf: dict, config) -> dict:
    """`hf` with the RoPE scaling of `config.position` written in (or ConfigError)."""
    local = _local_position(config)
    if local is not None and local.get("scaling", "none") != "none":
        raise ConfigError("model.local_position.scaling", local["scaling"],
                          "'none' (--to_hf writes a scaling for the global layers only, as "
                          "posjax's extend leaves the local ones)")
    position = config.position.to_dict()
    if position["name"] != "rope" or position.get("scaling", "none") == "none":
        return hf
    if family != "modernbert":
        raise ConfigError("position.scaling", position["scaling"],
                          f"'none' for {family}: transformers' RoFormer has no rope_scaling "
                          "(extend it with method='none', or export the unextended model)")
    m = schema.view(config).model
    head_dim = int(m.head_dim or m.hidden // m.num_heads)
    params, max_length = rope_parameters(position, head_dim)
    hf = dict(hf, rope_parameters=dict(hf["rope_parameters"], full_attention=params))
    if max_length is not None:
        hf["max_position_embeddings"] = max_length
    return hf
