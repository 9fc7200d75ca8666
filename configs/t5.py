"""Corpus: the King James Bible (English; WordPiece tokenizer).

T5 relative attention bias (Raffel et al. 2020): 32 log-spaced buckets up to distance 128, a
learned [buckets, heads] table shared by all layers, added to the logits; no absolute
position embedding. Pre-LN as T5; English (King James Bible, WordPiece).
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    defaults.english(config, defaults.parse_variant(arg))
    config.model.post_ln = False
    config.position = defaults.position(
        "t5", bidirectional=True, num_buckets=32, max_distance=128, share_layers=True
    )
    return config
