"""posjax.data.tfds_builders: build a tiny text_dir as ArrayRecord without TensorFlow, read it
back with as_data_source and tfds.data_source, and train from it through corpus='tfds'."""

from __future__ import annotations

import sys

import pytest

from posjax import data
from posjax.data import corpora, tfds_builders
from posjax.errors import ConfigError


def test_text_dir_round_trip(tmp_path, text_dir, make_config):
    import tensorflow_datasets as tfds

    data_dir = str(tmp_path / "tfds")
    config = make_config(corpus="text_dir", path=text_dir, max_documents=None)
    builder = tfds_builders.build_corpus(config, data_dir)
    assert "tensorflow" not in sys.modules  # built and read without TensorFlow
    assert list(builder.info.splits) == ["train"]
    assert builder.info.splits["train"].filename_template.filetype_suffix == "array_record"

    direct = corpora.load_documents(config)
    source = builder.as_data_source()["train"]
    by_id = {int(ex["doc_id"]): ex["text"].decode().split() for ex in source}
    assert [by_id[i] for i in range(len(direct))] == direct

    # The same data through tfds.data_source and the 'tfds' corpus.
    assert len(tfds.data_source("posjax_corpus/text_dir", split="train", data_dir=data_dir)) == 3
    tcfg = make_config(corpus="tfds", tfds_name="posjax_corpus/text_dir", path=data_dir,
                       max_documents=None, heldout_fraction=0.0, seq_len=16, batch_size=2)
    docs = corpora.load_documents(tcfg)
    assert sorted(map(tuple, docs)) == sorted(map(tuple, direct))
    tok = data.load_or_build(tcfg, str(tmp_path / "work"))
    batch = next(data.make_train_iterator(tcfg, tok, seed=0))
    assert batch["input_ids"].shape == (2, 16)


def test_segmented_words_survive():
    # Words joined by spaces keep the segmentation: reading back gives the same words.
    words = ["迈向", "充满", "希望", "的", "新", "世纪", "——", "１９９８年"]
    examples = list(tfds_builders.PosjaxCorpus._generate_examples(None, [words]))
    assert examples[0][1]["text"].split() == words


def test_prepare_rejects_other_corpora(tmp_path, make_config):
    with pytest.raises(ConfigError, match="peoples_daily, kjv, text_dir"):
        tfds_builders.build_corpus(make_config(corpus="tfds"), str(tmp_path))
