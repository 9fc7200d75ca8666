"""Corpus: the synthetic patch images of posjax/data/patches.py (no language; patch_codes tokens).

2-D RoPE on a masked-patch model: the encoder with its MLM head over quantized patch codes
of the synthetic image set (posjax/data/patches.py), trained on an 8 x 8 grid of patches.

    python train.py --config=configs/rope2d.py --workdir=workdirs/rope2d
    python train.py --config=configs/rope2d.py --config.position.mode=mixed
    python eval.py --workdir=workdirs/rope2d --out=results/rope2d --lengths=64,256,1024

mode: 'axial' (half the rotated pairs turn with the row, half with the column) or 'mixed'
(learned frequencies per direction, head and layer; Heo et al. 2024). base None = 100 axial,
10 mixed. The grid is sqrt(data.seq_len): --config.data.seq_len=256 trains on 16 x 16.
eval.py's lengths are grid * grid (64 = 8 x 8, 256 = 16 x 16); by default T, 4T, 16T, ...
Any 1-D scheme trains on the same images with raster positions r * grid + c
(`use_patches` below), e.g. --config.position.name=rope for the 1-D baseline.
"""

import ml_collections
from ml_collections.config_dict import placeholder

from posjax.config import defaults


def use_patches(config: ml_collections.ConfigDict, grid: int) -> None:
    """Switch config.data to the synthetic patch images on a grid x grid of patches."""
    d = config.data
    d.corpus, d.tokenizer = "patches", "patch_codes"
    d.vocab_size = None  # the patch codes decide it (5 specials + levels ** (patch * patch))
    d.seq_len = grid * grid
    d.mask_rate = 0.3  # neighbours predict a patch well; BERT's 15% leaves the task too easy
    d.patches = ml_collections.ConfigDict(dict(
        patch=2,  # pixels per patch side
        levels=2,  # gray levels per pixel: 2 ** (2 * 2) = 16 codes
        images=4096,  # training images (the held-out ones are another seeded stream)
        seed=0,
        positions=placeholder(str),  # None: (row, column) for 2-D schemes, raster for 1-D
    ))
    config.model.max_length = max(int(config.model.max_length), d.seq_len)
    config.model.type_vocab_size = 0  # one image per row: no segments


def get_config(arg=None):
    variant = defaults.parse_variant(arg)
    config = defaults.get_config(variant)
    config.position = defaults.position("rope2d", mode="axial", base=placeholder(float),
                                        interleaved=True, rotate_init=True)
    m, t = config.model, config.train
    if variant == "":
        m.hidden, m.num_layers, m.num_heads, m.mlp_dim = 64, 2, 4, 256
        m.max_length, m.dropout = 64, 0.0
        use_patches(config, grid=8)
        config.data.batch_size = 32
        t.steps, t.warmup_steps, t.log_every, t.eval_every = 1000, 50, 50, 250
    elif variant == "tiny":
        m.max_length = 16
        use_patches(config, grid=4)
    else:  # ViT-B-sized: 16 x 16 patches
        m.max_length = 256
        use_patches(config, grid=16)
    return config
