"""Corpus: the King James Bible (English; WordPiece tokenizer).

DeBERTa-v2 (He et al. 2021) disentangled attention: content-to-position and
position-to-content terms over log-bucketed relative distances (256 buckets, 512 max), logits
scaled by 1/sqrt(3D); no absolute position embedding. English (King James Bible, WordPiece).
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    defaults.english(config, defaults.parse_variant(arg))
    config.position = defaults.position(
        "deberta", c2p=True, p2c=True, bucket_size=256, max_position=512
    )
    return config
