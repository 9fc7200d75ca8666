r"""Image patches: 2-D RoPE against 1-D positions on raster order, trained on 8 x 8 grids of
the synthetic patch images (posjax/data/patches.py) and evaluated on 8 x 8, 16 x 16 and
32 x 32 grids (lengths 64, 256, 1024).

Every run has the body and data of configs/rope2d.py; only config.position differs. The 1-D
schemes read raster positions r * grid + c, whose neighbour offsets change with the grid (the
patch below is +8 at 8 x 8, +16 at 16 x 16); 2-D RoPE reads (row, column) and sees the same
offsets at every grid.

    nice -n 10 python eval.py --config=configs/experiments/patches.py --out=results/patches

Variant ':tiny' (a few steps, 4 x 4 grids evaluated at 4 x 4 and 8 x 8) checks the plumbing.
"""

import ml_collections

from configs import rope2d
from configs.experiments.common import experiment
from posjax.config import defaults

SCHEMES = {
    "rope2d_axial": dict(name="rope2d", mode="axial"),
    "rope2d_mixed": dict(name="rope2d", mode="mixed"),
    "rope_raster": dict(name="rope", interleaved=True),  # 1-D RoPE on raster order
    "learned_raster": dict(name="learned", rows=64),  # ViT's table, raster order
    "none": dict(name="none"),
    # 2024-2025 n-D schemes at their papers' defaults: M-RoPE (one image = one frame, t = 0),
    # STRING (RoPE after a learned orthogonal change of basis), LieRE and ComRoPE (learned
    # rotation generators; ComRoPE's commute, so its logits are relative).
    "mrope": dict(name="mrope"),
    "string": dict(name="string"),
    "liere": dict(name="liere"),
    "comrope": dict(name="comrope"),
}


def train_config(position: dict, arg=None):
    config = rope2d.get_config("tiny" if arg == "tiny" else None)
    if arg == "tiny" and "rows" in position:
        position = dict(position, rows=16)
    config.position = defaults.position(**position)
    return config


def get_config(arg=None):
    tiny = arg == "tiny"
    return experiment(
        "patches", {name: train_config(position, arg) for name, position in SCHEMES.items()},
        arg, lengths=[16, 64] if tiny else [64, 256, 1024],
        methods=ml_collections.FieldReference(None, field_type=list),  # each scheme's defaults
        alphas=[0.4])
