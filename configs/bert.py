"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

BERT (Devlin et al. 2019): learned absolute positions added to the embeddings, post-LN.

The learned table has model.max_length rows (512, as BERT); positions past it are an error.
To run such a table longer, see configs/hierarchical.py. Variants: '' (CPU), 'tiny', 'base'.
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    config.model.post_ln = True
    config.model.max_length = 512 if defaults.parse_variant(arg) != "tiny" else 64
    config.position = defaults.position("learned")  # rows = model.max_length
    return config
