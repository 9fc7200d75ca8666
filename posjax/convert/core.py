"""Convert a Hugging Face model directory into posjax: config, params, vocabulary.

    converted = convert_hf("path/to/hf_dir")
    converted.config      # ConfigDict (configs/base.py layout), vocab_size filled
    converted.params      # pure dict of float32 numpy arrays, the posjax MaskedLM layout
    converted.vocab       # posjax-ordered vocab.txt lines, or None (no vocab.txt in the dir)
    converted.hf_ids      # int32 [vocab]: posjax id -> HF id, or None when the order is the same

Vocabulary order: posjax tokenizers require [PAD] [UNK] [CLS] [SEP] [MASK] as ids 0..4 (the
batch contract pads with 0); a HF BERT vocab has them at 0, 100, 101, 102, 103. The converter
moves those five to the front and keeps every other token in HF order, permuting the rows of
the word table and of the MLM output bias the same way. The model is equivariant under a
consistent relabelling of ids, so outputs are unchanged; `hf_ids` maps ids back and forth.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any, Optional

import numpy as np

from posjax.convert import albert, bert, deberta, jinabert, modernbert, nomic
from posjax.convert.hf_config import Source, posjax_config, read_json
from posjax.convert.hf_weights import Weights, assemble, read_state_dict, weight_files
from posjax.errors import ConfigError

log = logging.getLogger(__name__)

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Stand-ins in a posjax vocab.txt for a blank line of the HF one and for embedding rows past
# its last line (posjax's reader skips blank lines; ids stay one per row).
BLANK_TOKEN = "[posjax_blank_{}]"
EXTRA_TOKEN = "[posjax_extra_{}]"
MAPPERS = {"bert": bert, "roberta": bert, "roformer": bert, "nezha": bert, "albert": albert,
           "deberta-v2": deberta, "modernbert": modernbert, "nomic-bert": nomic,
           "jinabert": jinabert}


@dataclasses.dataclass
class Converted:
    config: Any
    params: dict
    source: Source
    vocab: Optional[list]
    hf_ids: Optional[np.ndarray]
    has_mlm_head: bool
    notes: list
    hf_dir: str = ""

    def metadata(self) -> dict:
        """What convert.json records next to the workdir's config.json."""
        return {
            "hf_dir": os.path.abspath(self.hf_dir) if self.hf_dir else None,
            "model_type": self.source.model_type,
            "position_ids": self.source.position_ids,
            "has_mlm_head": self.has_mlm_head,
            "hf_ids": None if self.hf_ids is None else [int(i) for i in self.hf_ids],
            "notes": list(self.notes),
            "hf_config": self.source.hf_config,  # token ids etc. that --to_hf writes back
        }


def _note(notes: list, message: str) -> None:
    log.warning(message)
    notes.append(message)


def read_vocab(hf_dir: str, vocab_size: int, notes: list) -> tuple[Optional[list], Optional[np.ndarray]]:
    """posjax-ordered vocabulary and the posjax -> HF id map (None when no reorder is needed)."""
    path = os.path.join(hf_dir, "vocab.txt")
    if not os.path.isfile(path):
        if os.path.isfile(os.path.join(hf_dir, "tokenizer.json")) or os.path.isfile(
                os.path.join(hf_dir, "vocab.json")):
            _note(notes, "no vocab.txt (a BPE/SentencePiece tokenizer): posjax has no tokenizer for "
                  "it; pass HF token ids to encode()/mlm_logits() (ids are kept in HF order)")
        return None, None
    with open(path, encoding="utf-8") as f:
        hf_vocab = [line.rstrip("\n") for line in f]
    while hf_vocab and hf_vocab[-1] == "":
        hf_vocab.pop()
    if len(hf_vocab) > vocab_size:
        raise ConfigError("vocab.txt", f"{len(hf_vocab)} tokens",
                          f"at most config.json vocab_size={vocab_size} tokens")
    # Placeholders for blank lines (posjax's vocab.txt reader skips them) and for embedding rows
    # the vocabulary does not name (vocab_size > lines), so ids stay one per row.
    hf_vocab = [t if t.strip() else BLANK_TOKEN.format(i) for i, t in enumerate(hf_vocab)]
    hf_vocab += [EXTRA_TOKEN.format(i) for i in range(len(hf_vocab), vocab_size)]
    index = {}
    for i, token in enumerate(hf_vocab):
        index.setdefault(token, i)
    missing = [s for s in SPECIALS if s not in index]
    if missing:
        _note(notes, f"vocab.txt lacks {missing}: posjax's wordpiece tokenizer needs all of "
              f"{list(SPECIALS)}; converted without a tokenizer (ids kept in HF order)")
        return None, None
    front = [index[s] for s in SPECIALS]
    rest = [i for i in range(vocab_size) if i not in set(front)]
    perm = np.asarray(front + rest, np.int32)
    vocab = [hf_vocab[i] for i in perm]
    cfg_path = os.path.join(hf_dir, "tokenizer_config.json")
    if os.path.isfile(cfg_path):
        tok_cfg = read_json(cfg_path)
        if tok_cfg.get("do_lower_case") is False or tok_cfg.get("strip_accents") is False:
            _note(notes, "the HF tokenizer is cased (do_lower_case/strip_accents False) but posjax's "
                  "wordpiece tokenizer lowercases and strips accents: its ids differ from HF's on "
                  "uppercase/accented text")
    if np.array_equal(perm, np.arange(vocab_size)):
        return vocab, None
    return vocab, perm


def build_target(config, seed: int = 0) -> dict:
    """The posjax model's own params (pure dict of numpy arrays) at their init values."""
    import jax
    from flax import nnx

    from posjax.models import build_model

    with nnx.use_eager_sharding(False):
        model = build_model(config, nnx.Rngs(params=seed))
    pure = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    return jax.tree.map(np.asarray, pure)


def convert_hf(hf_dir: str) -> Converted:
    """Read config.json + weights (+ vocab.txt) of `hf_dir`; ConfigError if unsupported."""
    if not os.path.isdir(hf_dir):
        raise ConfigError("--hf", hf_dir, "an existing Hugging Face model directory")
    hf = read_json(os.path.join(hf_dir, "config.json"))
    config, src = posjax_config(hf)  # unsupported architectures fail here, before any weight
    weight_files(hf_dir)  # and a missing weights file here, before reading anything
    notes: list = []
    vocab, perm = read_vocab(hf_dir, int(config.model.vocab_size), notes)
    w = Weights(read_state_dict(hf_dir), src.prefix)
    if src.model_type == "albert" and albert.has_sop(w):
        config.model.sop = True
    if src.model_type == "roformer":
        bert.check_roformer_table(w, config.model.hidden // config.model.num_heads)
    mapped, has_head = MAPPERS[src.model_type].map_weights(w, config, src, perm)
    if not has_head:
        _note(notes, f"{os.path.basename(os.path.abspath(hf_dir))} has no MLM head: mlm_logits() "
              "uses a FRESHLY INITIALIZED head (encode() is unaffected)")
    params, fresh = assemble(build_target(config), mapped, fresh_ok=("lm_head",))
    unused = [n for n in w.unused() if not n.startswith(("pooler.", "sop_classifier."))]
    if unused:
        _note(notes, f"{len(unused)} checkpoint tensors not used: {', '.join(unused[:6])}"
              + (" ..." if len(unused) > 6 else ""))
    return Converted(config, params, src, vocab, perm, has_head, notes, hf_dir=hf_dir)


def hf_config_of(path: str) -> Optional[dict]:
    """The HF config.json of `path` if it is a HF model directory, else None."""
    cfg = os.path.join(path, "config.json")
    if not os.path.isfile(cfg):
        return None
    with open(cfg, encoding="utf-8") as f:
        data = json.load(f)
    return data if "model_type" in data or "architectures" in data else None
