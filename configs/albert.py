"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

ALBERT (Lan et al. 2020): factorized embeddings (vocab x E, then E -> hidden) and one
Transformer layer's parameters shared by all layers; learned absolute positions, which live in
the embedding width E (as ALBERT's own position table does). Sentence-order prediction is on
(model.sop: rows become [CLS] A [SEP] B [SEP], B before A half the time).
"""

from posjax.config import defaults


def get_config(arg=None):
    variant = defaults.parse_variant(arg)
    config = defaults.get_config(arg)
    config.model.embedding_dim = {"": 64, "tiny": 16, "base": 128}[variant]
    config.model.share_layers = True
    config.model.sop = True
    if variant == "":
        config.model.num_layers = 4  # sharing makes depth cheap in parameters
    config.position = defaults.position("learned")
    return config
