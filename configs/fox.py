"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

FoX, forgetting attention (Lin et al. ICLR 2025): per-token forget gates, whose log
cumulative sums give a data-dependent decay bias c[q] - c[k]; no position embedding. The
encoder decays in both directions (see posjax/positions/fox.py).

    python train.py --config=configs/fox.py

Runs on every attention path; in the Pallas kernel (model.attention='kernel') the sums c
are kernel inputs and their gradient comes back from the backward pass.
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    config.position = defaults.position("fox", gate_bias=3.0)
    return config
