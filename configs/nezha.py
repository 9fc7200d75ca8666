"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

NEZHA (Wei et al. 2019): functional (fixed sinusoid) relative positions in keys and values,
clipped at 64, no absolute position embedding; otherwise BERT (post-LN, Chinese corpus).
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    config.position = defaults.position("nezha", max_relative_position=64)
    return config
