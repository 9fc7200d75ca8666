"""Corpus: the King James Bible (English; WordPiece tokenizer).

The causal-LM variant of the same stack: pre-LN, RoPE with half-split pairs
(x_i, x_{i+d/2}) as GPT-NeoX / flaxformer / MaxText, tied LM head; English (King James Bible).

'lm_logits'[:, t] predicts input_ids[:, t + 1]; the MLM masking of the data pipeline is
unused by this model (the loss reads input_ids).
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    defaults.english(config, defaults.parse_variant(arg))
    config.model.causal = True
    config.model.post_ln = False
    config.model.type_vocab_size = 0
    config.position = defaults.position("rope", interleaved=False)
    return config
