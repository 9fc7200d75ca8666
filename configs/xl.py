"""Transformer-XL relative attention (Dai et al. 2019): logits (q+u).k + (q+v).W_r R_{i-j}
with a sinusoidal R, per-layer u, v, W_r; no absolute position embedding. Pre-LN; English.
"""

from configs import base


def get_config(arg=None):
    config = base.get_config(arg)
    base.english(config, base.parse_variant(arg))
    config.model.post_ln = False
    config.position = base.position("xl")  # rel_dim None = the model width
    return config
