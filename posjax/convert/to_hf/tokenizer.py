"""The tokenizer files of an exported model, so transformers' AutoTokenizer loads the folder.

A workdir with a WordPiece vocab.txt: the vocabulary is written back in HF id order (the
order of the exported word table, see to_hf/weights.py) with a BertTokenizer config that
lowercases and strips accents, as posjax's wordpiece tokenizer does. A model without one (a
BPE RoBERTa or ModernBERT, whose ids posjax keeps in HF order): the original checkpoint's
tokenizer files, when the directory convert.json names is still there. Either way
model_max_length becomes the exported length.
"""

from __future__ import annotations

import json
import os
import re
from typing import Optional

import numpy as np

from posjax.convert.core import BLANK_TOKEN, EXTRA_TOKEN, SPECIALS

# Files of a HF tokenizer, copied as they are (tokenizer_config.json gets model_max_length).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt", "vocab.json", "merges.txt", "added_tokens.json", "spiece.model",
                   "sentencepiece.bpe.model")
CONFIG_FILE = "tokenizer_config.json"


def _pattern(template: str) -> re.Pattern:
    return re.compile(re.escape(template).replace(re.escape("{}"), r"\d+"))


def hf_vocab(vocab: list, hf_ids: Optional[np.ndarray]) -> list:
    """posjax-ordered tokens -> the HF vocab.txt lines (blank lines and the length restored)."""
    lines = list(vocab)
    if hf_ids is not None:
        lines = [""] * len(vocab)
        for ours, theirs in enumerate(hf_ids):
            lines[int(theirs)] = vocab[ours]
    blank, extra = _pattern(BLANK_TOKEN), _pattern(EXTRA_TOKEN)
    while lines and extra.fullmatch(lines[-1]):
        lines.pop()
    return ["" if blank.fullmatch(t) else t for t in lines]


def _wordpiece(vocab: list, hf_ids, max_length: int) -> dict:
    pad, unk, cls, sep, mask = SPECIALS
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "strip_accents": None,
              "tokenize_chinese_chars": True, "model_max_length": max_length,
              "unk_token": unk, "sep_token": sep, "pad_token": pad, "cls_token": cls,
              "mask_token": mask}
    return {"vocab.txt": "\n".join(hf_vocab(vocab, hf_ids)) + "\n",
            CONFIG_FILE: json.dumps(config, indent=2) + "\n"}


def _original(hf_dir: str, max_length: int) -> dict:
    out = {}
    for name in TOKENIZER_FILES:
        path = os.path.join(hf_dir, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                out[name] = f.read()
    if CONFIG_FILE in out:
        config = json.loads(out[CONFIG_FILE])
        config["model_max_length"] = max_length
        out[CONFIG_FILE] = json.dumps(config, indent=2) + "\n"
    return out


def tokenizer_files(vocab: Optional[list], tokenizer: Optional[str], hf_ids, metadata: dict,
                    max_length: int) -> tuple[dict, Optional[str]]:
    """({file name: str or bytes}, a note when no tokenizer can be written)."""
    if vocab is not None and tokenizer == "wordpiece":
        return _wordpiece(vocab, hf_ids, max_length), None
    hf_dir = metadata.get("hf_dir")
    if hf_dir and os.path.isdir(hf_dir):
        files = _original(hf_dir, max_length)
        if files:
            return files, None
    return {}, ("no tokenizer files written: the workdir has no WordPiece vocab.txt and the "
                f"original checkpoint's directory ({hf_dir}) holds none or is gone; copy the "
                "model's tokenizer files into the exported folder")
