"""Corpus: the one the workdir's config.json names.

Config file for train.py that reads a workdir's own config.json:

    python train.py --config=configs/workdir.py:WORKDIR --workdir=WORKDIR
    python train.py --config=configs/workdir.py:WORKDIR --workdir=WORKDIR \
        --config.train.steps=1000 --config.data.corpus=text_dir --config.data.path=my_texts/

so a converted (or any) workdir continues training with exactly its pinned model, position and
tokenizer fields; training fields stay overridable on the command line.
"""

from __future__ import annotations

from posjax.errors import ConfigError
from posjax.training.workdir import read_config


def get_config(arg=None):
    if not arg:
        raise ConfigError("config variant", arg, "the workdir path: --config=configs/workdir.py:DIR")
    return read_config(arg, field="config variant")
