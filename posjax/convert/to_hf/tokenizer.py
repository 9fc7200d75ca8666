"""The tokenizer files of an exported model, so transformers' AutoTokenizer loads the folder
and gives posjax's ids for the same text. For the tokenizers posjax trains: vocab.txt in HF id
order (the order of the exported word table, see to_hf/weights.py), a tokenizer.json that is
posjax's own pipeline, tokenizer_config.json and special_tokens_map.json.

  wordpiece      tokenizer_class BertTokenizer, lowercasing and stripping accents as posjax's
                 wordpiece tokenizer does. (transformers loads ModernBERT's tokenizer from
                 tokenizer.json whatever the class says: the same ids.)
  chinese_chars  one token per non-space character, tokenizer_class PreTrainedTokenizerFast,
                 so AutoTokenizer reads tokenizer.json as it is rather than the family's own
                 class (RoFormer's asks for rjieba). BertTokenizer cannot give these ids: its
                 pre-tokenizer keeps runs of digits and Latin letters ("１９９８") as one word,
                 which a character vocabulary reads as [UNK], and transformers 5 rebuilds
                 BertTokenizer's pipeline in its own code whatever tokenizer.json says.
  patch_codes    none, with a note: the model reads image patch codes (posjax.data.patches),
                 not text (so any tokenizer that reads no text).

Unlike posjax's tokenize(), "[MASK]" and the other specials written in a text are read as
those tokens (what fill-mask pipelines expect). A model converted from HF without a WordPiece
vocab.txt (a BPE RoBERTa or ModernBERT, whose ids posjax keeps in HF order) gets the original
checkpoint's tokenizer files, when the directory convert.json names is still there. Either
way model_max_length becomes the exported length.
"""

from __future__ import annotations

import json
import os
import re
from typing import Optional

import numpy as np
from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        processors)

from posjax.convert.core import BLANK_TOKEN, EXTRA_TOKEN, SPECIALS

# Files of a HF tokenizer, copied as they are (tokenizer_config.json gets model_max_length).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt", "vocab.json", "merges.txt", "added_tokens.json", "spiece.model",
                   "sentencepiece.bpe.model")
CONFIG_FILE = "tokenizer_config.json"
TEXT_TOKENIZERS = ("wordpiece", "chinese_chars")


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


def _specials() -> dict:
    pad, unk, cls, sep, mask = SPECIALS
    return {"unk_token": unk, "sep_token": sep, "pad_token": pad, "cls_token": cls,
            "mask_token": mask}


# The characters posjax's chinese_chars tokenizer skips: Python's str.isspace(), the last of
# which is U+3000 (the tokenizers library's whitespace classes differ, e.g. at U+001C..U+001F).
_SPACES = "".join(f"\\x{{{i:04X}}}" for i in range(0x3000 + 1) if chr(i).isspace())


def _pipeline(tok: Tokenizer, kind: str) -> None:
    """posjax's own text -> tokens steps for tokenizer `kind`."""
    if kind == "wordpiece":  # as posjax.data.tokenizers.WordPiece
        tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                    strip_accents=True, lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    else:  # chinese_chars: every character but whitespace is a token
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(f"[{_SPACES}]+"), "removed"),
            pre_tokenizers.Split(Regex("."), "isolated")])
        tok.decoder = decoders.Fuse()


def _tokenizer_json(lines: list, kind: str) -> str:
    """tokenizer.json of posjax's tokenizer `kind` over the HF-ordered vocabulary `lines`, with
    [CLS] text [SEP] (pairs: [CLS] a [SEP] b [SEP], b of type 1) and the specials matched in
    the text ("[MASK]" is the mask token)."""
    ids = {t: i for i, t in enumerate(lines) if t}
    unk, cls, sep = SPECIALS[1:4]
    model = (models.WordPiece(ids, unk_token=unk, max_input_chars_per_word=100)
             if kind == "wordpiece" else models.WordLevel(ids, unk_token=unk))
    tok = Tokenizer(model)
    _pipeline(tok, kind)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, ids[cls]), (sep, ids[sep])])
    tok.add_special_tokens(list(SPECIALS))
    return tok.to_str(pretty=True) + "\n"


def _config(kind: str, max_length: int, token_types: bool) -> str:
    if kind == "wordpiece":
        # strip_accents None follows do_lower_case, as in BERT
        fields = {"tokenizer_class": "BertTokenizer", "do_lower_case": True,
                  "strip_accents": None, "tokenize_chinese_chars": True}
    else:
        fields = {"tokenizer_class": "PreTrainedTokenizerFast"}
    inputs = ["input_ids", "token_type_ids", "attention_mask"] if token_types else [
        "input_ids", "attention_mask"]
    config = {**fields, "model_max_length": max_length, "model_input_names": inputs,
              **_specials()}
    return json.dumps(config, indent=2) + "\n"


def _posjax_files(vocab: list, kind: str, hf_ids, max_length: int, token_types: bool) -> dict:
    lines = hf_vocab(vocab, hf_ids)
    return {"vocab.txt": "\n".join(lines) + "\n",
            "tokenizer.json": _tokenizer_json(lines, kind),
            CONFIG_FILE: _config(kind, max_length, token_types),
            "special_tokens_map.json": json.dumps(_specials(), indent=2) + "\n"}


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
                    max_length: int, token_types: bool = True) -> tuple[dict, Optional[str]]:
    """({file name: str or bytes}, a note when no tokenizer can be written). `token_types`:
    whether the exported model takes token_type_ids (ModernBERT does not)."""
    if vocab is not None and tokenizer in TEXT_TOKENIZERS:
        return _posjax_files(vocab, tokenizer, hf_ids, max_length, token_types), None
    if tokenizer not in TEXT_TOKENIZERS:
        return {}, (f"no tokenizer files written: data.tokenizer={tokenizer!r} reads no text "
                    "(patch_codes: image patch codes, posjax.data.patches); pass its ids (the "
                    "workdir's vocab.txt order) to the model")
    hf_dir = metadata.get("hf_dir")
    if hf_dir and os.path.isdir(hf_dir):
        files = _original(hf_dir, max_length)
        if files:
            return files, None
    return {}, ("no tokenizer files written: the workdir has no vocab.txt and the "
                f"original checkpoint's directory ({hf_dir}) holds none or is gone; copy the "
                "model's tokenizer files into the exported folder")
