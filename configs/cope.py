"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

CoPE, contextual position encoding (Golovneva et al. 2024): positions are gated counts of
keys (sigmoid of the attention logits), read from a learned table by interpolation; no
position embedding on the tokens. Encoders count in both directions with a table per side
(see posjax/positions/cope.py).

    python train.py --config=configs/cope.py

npos: table rows (counts clamp at npos - 1). Runs on 'reference' / 'chunked' attention;
model.attention='kernel' is refused.
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    config.position = defaults.position("cope", npos=64)
    return config
