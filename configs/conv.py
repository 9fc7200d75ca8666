"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

Convolutional position (CPE / wav2vec2 style): a depthwise convolution over the tokens,
x + gelu(conv(x) + b), and no position embedding at all. Whatever position the model gets
comes from the padding at the example's ends (Islam et al. ICLR 2020):

    python train.py --config=configs/conv.py                                   zero padding
    python train.py --config=configs/conv.py --config.position.padding=circular   no position
    python train.py --config=configs/conv.py --config.position.placement=layers   every layer

padding: 'zeros' | 'circular' | 'none'; placement: 'embed' (once, before layer 0) | 'layers'.
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    config.position = defaults.position("conv", kernel_size=15, padding="zeros",
                                        placement="embed")
    return config
