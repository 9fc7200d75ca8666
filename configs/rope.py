"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

RoPE, ready for a length-extension scaling from the command line without editing files (every
field of the scheme can be set there; the defaults are the Rope class's own):

    python train.py --config=configs/rope.py --config.position.interleaved=False
    python eval.py  ... --config.position.scaling=yarn --config.position.factor=8

scaling: 'none' | 'linear' | 'ntk' | 'dynamic_ntk' | 'yarn' | 'llama3' | 'longrope' |
'proportional' (`python -m posjax list schemes` prints every field and its default).
original_length is the PRETRAINING length (data.seq_len here), which dynamic NTK, YaRN, llama3
and longrope need. longrope also needs one short and one long factor per rotated pair, e.g.
--config.position.short_factor="(1.0, 1.1, ...)". proportional (p-RoPE) keeps the frequencies
of the first rotary_fraction of the dims and zeroes the rest. Pairing defaults to interleaved
(RoFormer); see configs/roformer.py for the plain RoFormer and configs/causal.py for half-split
RoPE in a causal LM.
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    # only what this config decides; the scheme's defaults stay in posjax/positions/rotary.py
    config.position = defaults.position("rope", original_length=config.data.seq_len)
    return config
