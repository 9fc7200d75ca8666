"""Config file for train.py that reads a workdir's own config.json:

    python train.py --config=posjax/convert/workdir_config.py:WORKDIR --workdir=WORKDIR
    python train.py --config=posjax/convert/workdir_config.py:WORKDIR --workdir=WORKDIR \
        --config.train.steps=1000 --config.data.corpus=text_dir --config.data.path=my_texts/

so a converted (or any) workdir continues training with exactly its pinned model, position and
tokenizer fields; training fields stay overridable on the command line.
"""

from __future__ import annotations

from posjax.convert.workdir import read_config
from posjax.errors import ConfigError


def get_config(arg=None):
    if not arg:
        raise ConfigError("config variant", arg, "the workdir path: --config=.../workdir_config.py:DIR")
    return read_config(arg)
