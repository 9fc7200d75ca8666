"""Corpus: the King James Bible (English; WordPiece tokenizer).

TUPE (Ke et al. 2021), TUPE-R: untied positional correlation (a separately projected
position table, shared by all layers, as a logit bias), [CLS] reset, plus T5-style relative
buckets; word-word logits scaled by 1/sqrt(2D). English (King James Bible, WordPiece).

TUPE's position table has model.max_length rows, so positions past it are an error.
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    defaults.english(config, defaults.parse_variant(arg))
    config.position = defaults.position(
        "tupe", relative=True, num_buckets=32, max_distance=128, cls_reset=True
    )
    return config
