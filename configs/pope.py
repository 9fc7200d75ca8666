"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

PoPE, polar coordinate position embeddings (Gopalakrishnan et al. 2025): every head dim is
a complex number with magnitude softplus(content) and phase position * theta_c (+ a learned
per-head phase bias), so content and position never share a phase; no position embedding
on the tokens.

    python train.py --config=configs/pope.py
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    config.position = defaults.position("pope", base=10000.0, learn_bias=True)
    return config
