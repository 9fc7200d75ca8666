"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

Test-sized run with any registered scheme: `--config=configs/tiny.py:rope`.

The argument is a scheme name (default 'learned'), built with its default fields, on the
'tiny' size of configs/base.py (2 layers, hidden 32, seq_len 32, batch 4, 4 steps). Causal-only
schemes (xpos) get model.causal=True; t5 gets causal buckets to match. 2-D and 3-D schemes
(rope2d, mrope) read grid positions: they get the synthetic patch images on a 4 x 4 grid
(seq_len 16).
"""

from posjax.config import defaults
from posjax.errors import ConfigError
from posjax.positions import names, scheme_class


def get_config(arg=None):
    name = (arg or "").strip() or "learned"
    if name not in names():
        raise ConfigError("config variant", arg, f"a scheme name, one of {', '.join(names())}")
    config = defaults.get_config("tiny")
    config.position = defaults.position(name)
    if scheme_class(name).causal_only:
        config.model.causal = True
    if scheme_class(name).position_dims != 1:
        from configs.rope2d import use_patches

        use_patches(config, grid=4)
    return config
