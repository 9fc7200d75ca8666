"""ALiBi (Press et al. 2022): fixed per-head linear distance penalties on the logits, no
position embedding. The encoder uses the symmetric -slope*|i-j| (fairseq's is causal-only).
English (King James Bible, WordPiece); pre-LN, as the ALiBi models.
"""

from configs import base


def get_config(arg=None):
    config = base.get_config(arg)
    base.english(config, base.parse_variant(arg))
    config.model.post_ln = False
    config.position = base.position("alibi")
    return config
