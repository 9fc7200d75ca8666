"""Corpus: the King James Bible (English; WordPiece tokenizer).

Transformer-XL relative attention (Dai et al. 2019): logits (q+u).k + (q+v).W_r R_{i-j}
with a sinusoidal R, per-layer u, v, W_r; no absolute position embedding. Pre-LN; English.
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    defaults.english(config, defaults.parse_variant(arg))
    config.model.post_ln = False
    config.position = defaults.position("xl")  # rel_dim None = the model width
    return config
