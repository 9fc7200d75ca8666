"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

The defaults as a config file: BERT with learned positions.

    python train.py --config=configs/base.py          CPU-sized BERT (learned positions)
    python train.py --config=configs/base.py:base     paper-size BERT-base, bf16, for accelerators
    python train.py --config=configs/base.py:tiny     seconds-long smoke run (tests)

The defaults themselves live in the package (posjax/schema/fields.py declares every field, its
default and its check; posjax/config/defaults.py adds the sizes), so that an installed posjax (the
converter, library users) has them without this directory.
"""

from posjax.config.defaults import (  # noqa: F401  (re-exported for scripts that import configs.base)
    VARIANTS,
    english,
    get_config,
    paper_size,
    parse_variant,
    position,
    tiny,
)
