"""Shared fixtures for posjax.data tests: a small config factory and tiny text directories."""

from __future__ import annotations

import ml_collections
import pytest


def data_config(**data) -> ml_collections.ConfigDict:
    """A config with only the fields posjax.data reads (the config.data layout of the brief)."""
    fields = dict(corpus="peoples_daily", path="", tfds_name="", seq_len=64, batch_size=4,
                  tokenizer="chinese_chars", vocab_size=3000, mask_rate=0.15, whole_word=False,
                  heldout_fraction=0.1, max_documents=60, randomized_max_length=None)
    fields.update(data)
    config = ml_collections.ConfigDict({"seed": 0})
    config.data = ml_collections.ConfigDict(fields)
    return config


@pytest.fixture
def make_config():
    return data_config


@pytest.fixture(scope="session")
def chars():
    """Character tokenizer trained on 40 People's Daily articles."""
    from posjax.data import tokenizers

    return tokenizers.build(data_config(max_documents=40, vocab_size=2000))


@pytest.fixture(scope="session")
def wordpiece():
    """WordPiece trained on the first four books of the King James Bible."""
    from posjax.data import tokenizers

    return tokenizers.build(data_config(corpus="kjv", tokenizer="wordpiece", vocab_size=2000,
                                        max_documents=4))


@pytest.fixture
def text_dir(tmp_path):
    """Three English documents, one of them long, plus an empty file."""
    root = tmp_path / "texts"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("The quick brown fox jumps over the lazy dog.\n" * 3, encoding="utf-8")
    (root / "b.txt").write_text("Packing puts several short documents into one row.", encoding="utf-8")
    (root / "sub" / "c.txt").write_text(" ".join(f"word{i % 37} running" for i in range(300)),
                                        encoding="utf-8")
    (root / "empty.txt").write_text("  \n", encoding="utf-8")
    (root / "ignored.md").write_text("not a txt file", encoding="utf-8")
    return str(root)
