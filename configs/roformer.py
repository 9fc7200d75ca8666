"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

RoFormer (Su et al. 2021): rotary position embedding, interleaved pairs (x0,x1),(x2,x3)...
as in RoFormer / bert4keras / HF RoFormer; no absolute position embedding; post-LN BERT body.
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    config.position = defaults.position("rope", interleaved=True, base=10000.0)
    return config
