"""posjax.data.tokenizers: special ids, round trips, word starts, vocab.txt reuse, check_vocab."""

from __future__ import annotations

import os

import numpy as np
import pytest

from posjax.data import tokenizers
from posjax.errors import ConfigError


@pytest.mark.parametrize("name", ["chars", "wordpiece"])
def test_special_ids(name, request):
    tok = request.getfixturevalue(name)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tok.num_special == 5 and tok.vocab_size == len(tok.vocab) <= 2000
    assert len(set(tok.vocab)) == tok.vocab_size


def test_chinese_chars_round_trip_and_words(chars):
    text = "中国人民迈向新世纪"
    ids = chars.encode(text)
    assert chars.decode(ids) == text
    assert all(i >= chars.num_special for i in ids)  # all these characters are in the vocab
    ids, starts = chars.encode_document(["中国", "人民", "迈向", "新", "世纪"])
    assert ids.dtype == np.int32 and ids.tolist() == chars.encode(text)
    assert starts.tolist() == [True, False, True, False, True, False, True, True, False]
    assert chars.decode(chars.encode("𝔘")) == "[UNK]"
    # Frequency order: '，' then '的' are the most frequent characters of People's Daily.
    assert chars.vocab[5:7] == ["，", "的"]


def test_chinese_chars_ids_are_the_vocabulary_lookup_of_each_character(chars):
    # the encoder looks characters up in a table by code point; the definition is one
    # vocabulary lookup per character
    # vocabulary lookup per character, and a word start at each word's first character and at
    # every character of a word longer than max_word_chars
    docs = [["中国", "人民"], [], ["𝔘", "新 世纪", "\ud800", "中" * 12], ["", "的"], ["，"]]
    got = [chars.encode_document(words) for words in docs]
    for (ids, starts), words in zip(got, docs):
        want_ids = [chars.token_to_id.get(c, chars.unk_id) for c in "".join(words)]
        want_starts = [i == 0 or len(w) > chars.max_word_chars for w in words for i in range(len(w))]
        assert ids.dtype == np.int32
        assert ids.tolist() == want_ids
        assert starts.tolist() == want_starts
    assert chars.unk_id in got[2][0].tolist()  # the astral and unpaired characters, the space


def test_chinese_chars_vocabulary_is_by_count_then_character():
    import collections

    docs = [["中国", "国人"], ["b a", "ab", "[PAD]"], ["𝔘𝔘", "\t的"], []]
    counts = collections.Counter("".join(w for d in docs for w in d))
    want = sorted((c for c in counts if not c.isspace()), key=lambda c: (-counts[c], c))
    for size in (7, 9, 100):
        vocab = tokenizers.ChineseChars.train(iter(docs), size).vocab
        assert vocab == list(tokenizers.SPECIALS) + want[: size - len(tokenizers.SPECIALS)]


def test_chinese_chars_long_words_are_split(chars):
    _, starts = chars.encode_document(["中" * 20])  # an unsegmented sentence, not a word
    assert starts.all()


def test_wordpiece_round_trip_and_continuations(wordpiece):
    text = "And God said, Let there be light. And there was light!"
    assert wordpiece.decode(wordpiece.encode(text)) == text.lower()
    # The decoder's cleanup leaves " :" spaced, so in general the round trip is on ids.
    ids = wordpiece.encode("the LORD God formed man of the dust: and breathed; selah")
    assert wordpiece.encode(wordpiece.decode(ids)) == ids
    ids, starts = wordpiece.encode_document("the firmamentally unrighteousness".split())
    toks = wordpiece.tokens(ids)
    assert any(t.startswith("##") for t in toks)
    assert starts.tolist() == [not t.startswith("##") for t in toks]
    assert starts[0]


def test_load_or_build_saves_and_reuses(tmp_path, make_config):
    config = make_config(max_documents=20, vocab_size=500)
    tok = tokenizers.load_or_build(config, str(tmp_path))
    path = tmp_path / "vocab.txt"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines == tok.vocab  # BERT format: one token a line, id = line number
    # Reused as is, even when the config would now build something else.
    again = tokenizers.load_or_build(make_config(max_documents=40, vocab_size=900), str(tmp_path))
    assert again.vocab == tok.vocab
    # A vocab written by hand is read back too.
    path.write_text("\n".join(tok.vocab[:5] + ["a", "b"]) + "\n", encoding="utf-8")
    assert tokenizers.load_or_build(config, str(tmp_path)).vocab_size == 7


def test_wordpiece_vocab_reload_encodes_identically(tmp_path, wordpiece):
    path = os.path.join(tmp_path, "vocab.txt")
    wordpiece.save(path)
    again = tokenizers.load("wordpiece", path)
    text = "In the beginning God created the heaven and the earth."
    assert again.encode(text) == wordpiece.encode(text)


def test_check_vocab(chars):
    tokenizers.check_vocab(chars, chars.vocab_size, chars.fingerprint())
    with pytest.raises(ConfigError, match="vocab.txt"):
        tokenizers.check_vocab(chars, chars.vocab_size + 1)
    other = tokenizers.ChineseChars(list(reversed(chars.vocab[5:])) and
                                    chars.vocab[:5] + list(reversed(chars.vocab[5:])))
    with pytest.raises(ConfigError, match="fingerprint"):
        tokenizers.check_vocab(other, chars.vocab_size, chars.fingerprint())


def test_bad_config(make_config, tmp_path):
    with pytest.raises(ConfigError, match="chinese_chars, wordpiece"):
        tokenizers.load_or_build(make_config(tokenizer="sentencepiece"), str(tmp_path))
    with pytest.raises(ConfigError, match="data.vocab_size"):
        tokenizers.build(make_config(vocab_size=3))
    bad = tmp_path / "bad.txt"
    bad.write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[PAD\]"):
        tokenizers.load("chinese_chars", str(bad))
