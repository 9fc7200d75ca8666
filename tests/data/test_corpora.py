"""posjax.data.corpora: the embedded corpora, text directories, TFDS errors, the held-out split."""

from __future__ import annotations

import logging

import pytest

from posjax.data import corpora
from posjax.errors import ConfigError


def test_peoples_daily_articles_are_words_without_tags(make_config):
    docs = corpora.load_documents(make_config(max_documents=30))
    assert len(docs) == 30
    words = [w for d in docs for w in d]
    assert not any("/" in w and w.rsplit("/", 1)[1].isalpha() and w.rsplit("/", 1)[1].isascii()
                   for w in words)  # POS tags stripped
    # The first article is the 1998 New Year speech; the second the New Year editorial.
    assert "".join(docs[0]).startswith("迈向充满希望的新世纪")
    assert "".join(docs[1]).startswith("在十五大精神指引下胜利前进")
    assert "江" in docs[0] and "泽民" in docs[0]  # segmented words, not characters
    assert all(len(d) >= 8 for d in docs)


def test_peoples_daily_whole_month():
    docs = corpora.read_peoples_daily()
    assert 2500 < len(docs) < 3500  # ~2.9k articles recovered from headlines
    assert sum(map(len, docs)) == 1121447  # every word of 199801.txt, once


def test_kjv_one_document_per_book():
    books = corpora.read_kjv()
    assert len(books) == 66
    assert books[0][:4] == ["In", "the", "beginning", "God"]
    assert books[-1][-1] == "Amen."
    assert max(map(len, books)) > 30000  # long documents for 8k+ evaluation
    assert not any(":" in w and w.replace(":", "").isdigit() for b in books for w in b)


def test_text_dir(text_dir, make_config, caplog):
    with caplog.at_level(logging.WARNING):
        docs = corpora.load_documents(make_config(corpus="text_dir", path=text_dir, max_documents=None))
    assert len(docs) == 3  # a.txt, b.txt, sub/c.txt; empty.txt skipped, .md ignored
    assert docs[0][:2] == ["The", "quick"]
    assert "empty.txt" in caplog.text


def test_text_dir_non_utf8_names_the_file(tmp_path, make_config):
    (tmp_path / "gbk.txt").write_bytes("人民日报".encode("gbk"))
    with pytest.raises(ConfigError, match="gbk.txt"):
        corpora.load_documents(make_config(corpus="text_dir", path=str(tmp_path)))


def test_text_dir_missing_or_empty(tmp_path, make_config):
    with pytest.raises(ConfigError, match="data.path"):
        corpora.load_documents(make_config(corpus="text_dir", path=str(tmp_path / "nope")))
    with pytest.raises(ConfigError, match="non-empty"):
        corpora.load_documents(make_config(corpus="text_dir", path=str(tmp_path)))


def test_unknown_corpus_lists_allowed(make_config):
    with pytest.raises(ConfigError, match="peoples_daily, kjv, text_dir, tfds"):
        corpora.load_documents(make_config(corpus="wiki"))


def test_tfds_not_prepared_names_dataset_and_dir(tmp_path, make_config):
    config = make_config(corpus="tfds", tfds_name="posjax_missing_dataset", path=str(tmp_path))
    with pytest.raises(ConfigError) as e:
        corpora.load_documents(config)
    assert "posjax_missing_dataset" in str(e.value) and str(tmp_path) in str(e.value)
    with pytest.raises(ConfigError, match="data.tfds_name"):
        corpora.load_documents(make_config(corpus="tfds", tfds_name=""))


def test_heldout_split_disjoint_deterministic():
    train, held = corpora.split_indices(1000, 0.1, seed=0)
    assert set(train).isdisjoint(held) and sorted(train + held) == list(range(1000))
    assert 60 < len(held) < 140
    assert corpora.split_indices(1000, 0.1, seed=0) == (train, held)
    assert corpora.split_indices(1000, 0.1, seed=1)[1] != held
    # A document's side does not depend on how many documents there are.
    assert set(corpora.split_indices(500, 0.1, seed=0)[1]) == {i for i in held if i < 500}
    # Tiny corpora still get one held-out and at least one training document.
    t, h = corpora.split_indices(3, 0.01)
    assert len(h) == 1 and len(t) == 2
    assert corpora.split_indices(10, 0.0) == (list(range(10)), [])
    with pytest.raises(ConfigError, match="heldout_fraction"):
        corpora.split_indices(10, 1.0)


def test_split_documents(make_config):
    config = make_config(max_documents=40, heldout_fraction=0.25)
    train = corpora.split_documents(config, "train")
    held = corpora.split_documents(config, "heldout")
    assert len(train) + len(held) == 40 and held
    assert not {tuple(d) for d in train} & {tuple(d) for d in held}
    with pytest.raises(ConfigError, match="split"):
        corpora.split_documents(config, "test")
