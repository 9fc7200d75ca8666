"""T5 relative attention bias (Raffel et al. 2020): 32 log-spaced buckets up to distance 128, a
learned [buckets, heads] table shared by all layers, added to the logits; no absolute
position embedding. Pre-LN as T5; English (King James Bible, WordPiece).
"""

from configs import base


def get_config(arg=None):
    config = base.get_config(arg)
    base.english(config, base.parse_variant(arg))
    config.model.post_ln = False
    config.position = base.position(
        "t5", bidirectional=True, num_buckets=32, max_distance=128, share_layers=True
    )
    return config
