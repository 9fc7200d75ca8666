"""DeBERTa-v2 (He et al. 2021) disentangled attention: content-to-position and
position-to-content terms over log-bucketed relative distances (256 buckets, 512 max), logits
scaled by 1/sqrt(3D); no absolute position embedding. English (King James Bible, WordPiece).
"""

from configs import base


def get_config(arg=None):
    config = base.get_config(arg)
    base.english(config, base.parse_variant(arg))
    config.position = base.position(
        "deberta", c2p=True, p2c=True, bucket_size=256, max_position=512
    )
    return config
