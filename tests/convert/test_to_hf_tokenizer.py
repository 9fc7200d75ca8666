"""--to_hf writes a tokenizer AutoTokenizer loads for each tokenizer posjax trains: real text
-> posjax ids == the exported tokenizer's ids -> the exported model's logits == posjax's.

The models are conftest's tiny random BERT and RoFormer (99 ids), given a vocabulary of a
posjax tokenizer trained on the embedded corpora and no convert.json (as a model posjax
trained), so their ids are posjax's."""

from __future__ import annotations

import json
import os
import pickle

import ml_collections
import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer

from posjax.convert import to_hf
from posjax.convert.to_hf.tokenizer import tokenizer_files
from posjax.data import corpora
from posjax.data.tokenizers import SPECIALS, ChineseChars, WordPiece
from posjax.pretrained import Pretrained

from tests.convert.conftest import VOCAB, real
from tests.convert.test_parity import TOL

# tokenizer_class per posjax tokenizer (chinese_chars: tokenizer.json as written, see
# posjax/convert/to_hf/tokenizer.py)
CLASSES = {"wordpiece": "BertTokenizer", "chinese_chars": "PreTrainedTokenizerFast"}
FULLWIDTH_DIGITS = [chr(ord("０") + i) for i in range(10)]


@pytest.fixture(scope="module")
def peoples_daily() -> list[str]:
    return ["".join(words) for words in corpora.read_peoples_daily()]


@pytest.fixture(scope="module")
def kjv() -> list[str]:
    return [" ".join(words) for words in corpora.read_kjv()]


def _chars_vocab(texts: list[str]) -> list[str]:
    """The specials, the fullwidth digits (People's Daily writes dates in them: runs that
    BERT's pre-tokenizer keeps as one word) and the first other characters of `texts`, VOCAB
    tokens in all; every other character is [UNK]."""
    chars = list(dict.fromkeys(c for t in texts for c in t if not c.isspace()))
    chars = [c for c in chars if c not in FULLWIDTH_DIGITS]
    return list(SPECIALS) + FULLWIDTH_DIGITS + chars[: VOCAB - len(SPECIALS) - 10]


def _with_tokenizer(model: Pretrained, name: str, vocab: list) -> Pretrained:
    config = ml_collections.ConfigDict(model.config.to_dict())
    config.data.tokenizer = name
    return Pretrained(config, model.params, vocab=vocab, metadata={})


def _texts(kind, peoples_daily, kjv) -> list[str]:
    if kind == "chinese_chars":
        return [peoples_daily[0][:60], "１９９８年１２月３１日，新华社北京电。"]
    return [kjv[0][:80], "Café ÉDEN, the LORD's garden (Genesis 2:8)."]


@pytest.mark.parametrize("arch, kind", [("bert", "chinese_chars"), ("roformer", "chinese_chars"),
                                        ("bert", "wordpiece"), ("modernbert", "wordpiece")])
def test_text_to_ids_to_logits(cases, peoples_daily, kjv, tmp_path, arch, kind):
    texts = _texts(kind, peoples_daily, kjv)
    if kind == "chinese_chars":
        vocab = _chars_vocab(texts[:1])
    else:
        vocab = WordPiece.train([t.split() for t in kjv[:5]], VOCAB).vocab
    model = _with_tokenizer(cases[arch].model, kind, vocab)
    path, export = to_hf.export(model, str(tmp_path / "hf"))
    assert export.family == arch
    with open(os.path.join(path, "tokenizer_config.json")) as f:
        assert json.load(f)["tokenizer_class"] == CLASSES[kind]
    tok = transformers.AutoTokenizer.from_pretrained(path)
    assert "RoFormer" not in type(tok).__name__  # RoFormer's asks for rjieba
    ours, mask = model.tokenize(texts)
    theirs = tok(texts, padding=True, return_tensors="np")
    np.testing.assert_array_equal(theirs["input_ids"], ours)
    tok.save_pretrained(str(tmp_path / "again"))
    again = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "again"))
    np.testing.assert_array_equal(again(texts, padding=True, return_tensors="np")["input_ids"], ours)
    np.testing.assert_array_equal(theirs["attention_mask"], mask)
    assert ("token_type_ids" in theirs) == (arch != "modernbert")  # ModernBERT has none
    assert (ours == model.tokenizer.unk_id).any()  # unknown characters are part of the test
    with torch.no_grad():
        hf = transformers.AutoModelForMaskedLM.from_pretrained(path).eval()
        logits = hf(**{k: torch.from_numpy(v.astype(np.int64)) for k, v in theirs.items()}).logits
    np.testing.assert_allclose(real(logits.numpy(), mask),
                               real(model.mlm_logits(ours, mask), mask), atol=TOL, rtol=0)


def test_chinese_chars_files_give_a_token_per_character():
    """Digits and Latin letters, which BERT's pre-tokenizer would keep as one word, are a
    token per character; every Python whitespace character is skipped, as posjax does; the
    ids survive a pickle (worker processes) and save_pretrained; [MASK] is the mask token."""
    vocab = list(SPECIALS) + ["年", "，", "Ａ", "Ｂ", "x"] + FULLWIDTH_DIGITS
    files, note = tokenizer_files(vocab, "chinese_chars", None, {}, 64)
    assert note is None
    assert set(files) == {"vocab.txt", "tokenizer.json", "tokenizer_config.json",
                          "special_tokens_map.json"}
    assert files["vocab.txt"].split("\n")[:-1] == vocab
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(files["tokenizer.json"]))
    text = "１９９８年ＡＢ，x１ＡＢ年 y\u3000\x1c\u0085\u200b\t年"
    want = [2] + ChineseChars(vocab).encode(text) + [3]
    assert want.count(1) == 2  # y and the zero-width space: unknown, not dropped
    assert hf(text)["input_ids"] == want
    assert pickle.loads(pickle.dumps(hf))(text)["input_ids"] == want
    assert hf("年[MASK]")["input_ids"] == [2, 5, 4, 3]
    assert hf.decode(hf("１９９８年")["input_ids"], skip_special_tokens=True) == "１９９８年"


@pytest.mark.slow  # the whole corpus through both tokenizers, 3-5 s on 2 busy cores
def test_every_peoples_daily_document_gets_posjax_ids(peoples_daily, tmp_path):
    """The full character vocabulary a run trains: AutoTokenizer on the exported files gives
    posjax's ids for every document of the corpus."""
    posjax = ChineseChars.train([[t] for t in peoples_daily], 6000)
    files, _ = tokenizer_files(posjax.vocab, "chinese_chars", None, {}, 512)
    for name, content in files.items():
        (tmp_path / name).write_text(content, encoding="utf-8")
    (tmp_path / "config.json").write_text('{"model_type": "roformer"}')
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    theirs = hf(peoples_daily, add_special_tokens=False)["input_ids"]
    differ = [i for i, (text, ids) in enumerate(zip(peoples_daily, theirs))
              if posjax.encode(text) != ids]
    assert differ == []


def test_patch_codes_write_no_tokenizer_and_say_why():
    files, note = tokenizer_files(list(SPECIALS) + ["p0", "p1"], "patch_codes", None, {}, 64)
    assert files == {} and "image patch codes" in note and "patch_codes" in note
