"""Corpus: the King James Bible (English; WordPiece tokenizer).

ALiBi (Press et al. 2022): fixed per-head linear distance penalties on the logits, no
position embedding. The encoder uses the symmetric -slope*|i-j| (fairseq's is causal-only).
English (King James Bible, WordPiece); pre-LN, as the ALiBi models.
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    defaults.english(config, defaults.parse_variant(arg))
    config.model.post_ln = False
    config.position = defaults.position("alibi")
    return config
