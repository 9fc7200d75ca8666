"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

RoPE with every field of the scheme spelled out, so the command line can switch the pairing
or a length-extension scaling without editing files:

    python train.py --config=configs/rope.py --config.position.interleaved=False
    python eval.py  ... --config.position.scaling=yarn --config.position.factor=8

scaling: 'none' | 'linear' | 'ntk' | 'dynamic_ntk' | 'yarn' | 'llama3' | 'longrope' |
'proportional'; original_length is the PRETRAINING length (data.seq_len here), which dynamic
NTK, YaRN, llama3 and longrope need. longrope also needs one short and one long factor per
rotated pair, e.g. --config.position.short_factor="(1.0, 1.1, ...)". proportional (p-RoPE)
keeps the frequencies of the first rotary_fraction of the dims and zeroes the rest. Pairing defaults to
interleaved (RoFormer); see configs/roformer.py for the plain RoFormer and configs/causal.py
for half-split RoPE in a causal LM.
"""

from ml_collections.config_dict import placeholder

from posjax import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    config.position = defaults.position(
        "rope",
        base=10000.0,
        interleaved=True,
        rotary_dim=placeholder(int),  # None = the whole head
        rotary_fraction=placeholder(float),
        scaling="none",
        factor=1.0,
        original_length=config.data.seq_len,
        beta_fast=32.0,
        beta_slow=1.0,
        attention_factor=placeholder(float),  # None = YaRN's 0.1*ln(s) + 1 / LongRoPE's
        low_freq_factor=1.0,  # llama3 wavelength edges L/low, L/high
        high_freq_factor=4.0,
        short_factor=placeholder(tuple),  # longrope: one factor per rotated pair
        long_factor=placeholder(tuple),
        on_values=False,  # True: rotate v too (configs/rope_values.py)
    )
    return config
