"""A synthetic image set for masked-patch modelling: seeded grayscale pictures of random
shapes on plain or striped backgrounds, cut into patches and quantized into patch codes.

Every image is a function of (data.patches.seed, split, grid, index), so the set needs no
download, no cache and no storage: the training split draws images 0 .. images-1 at the
training grid; held-out images come from another stream (split 1) at any grid.

An image of a g x g grid is a square canvas of S = g * patch pixels:
  background  plain (a uniform gray level) or, half the time, a sinusoidal grating of
              period 3..8 pixels in a random direction and phase
  shapes      Poisson(S*S / 64) of them (the same density at every grid), each an
              axis-aligned rectangle or an ellipse with half-sizes 1.5..5 pixels, at a
              uniform centre, filled with a uniform gray level
Sizes are in pixels, not fractions of the canvas, so a larger grid shows more of the same
world rather than a magnified picture: what a model learned about neighbouring patches at
8 x 8 still holds at 16 x 16, and only the positions are new.

Each pixel is quantized to `levels` gray levels; a patch's code is its pixel levels read as a
base-`levels` number (row-major), so there are levels**(patch*patch) codes, and the token id
is num_special + code (vocabulary: the specials, then one token per code; tokenizer
'patch_codes'). A row is one image's g*g patch tokens in raster order, no [CLS]/[SEP]:

  positions   [L, 2] (row, column) for a 2-D position scheme (rope2d), [L, 3] (0, row,
              column) for a 3-D one (mrope: one image is one frame, t = 0), [L] raster
              indices r * g + c for the others (data.patches.positions='grid' / 'raster'
              forces one)
  masking     BERT's: round(mask_rate * L) patches chosen per row, 80/10/10 corruption

config.data: corpus='patches', tokenizer='patch_codes', seq_len = grid * grid (the grid is
sqrt(seq_len)), vocab_size None (the codes decide it); config.data.patches fields (all
optional): patch (2), levels (2), images (4096 training images), seed (0), positions (None).

Evaluation (eval.py) at a length L = g * g scores held-out images of that grid, about
`masked_tokens` masked patches in all, with masks fixed by the seed. Unlike text, a larger
grid cannot re-read the same tokens: each grid has its own held-out images, drawn from the
same distribution; intervals resample images.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from posjax import schema
from posjax.data import masking
from posjax.data.batching import shuffled_batches
from posjax.data.scored_rows import Rows
from posjax.errors import ConfigError

DEFAULTS = dict(patch=2, levels=2, images=4096, seed=0, positions=None)
POSITIONS = ("grid", "raster")
MAX_CODES = 4096  # levels ** (patch * patch): the vocabulary the MLM head predicts over
TRAIN, HELDOUT = 0, 1


def _given(config: Any) -> dict:
    given = schema.view(config).data.patches
    return {} if given is None else dict(given)


def is_patches(config: Any) -> bool:
    return schema.view(config).data.corpus == "patches"


def settings(config: Any) -> dict:
    """config.data.patches merged over DEFAULTS, checked (ConfigError names the field)."""
    given = _given(config)
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"data.patches.{unknown[0]}", given[unknown[0]],
                          f"a known field (one of {', '.join(DEFAULTS)})")
    s = {**DEFAULTS, **given}
    for name, low in (("patch", 1), ("levels", 2), ("images", 1), ("seed", 0)):
        v = s[name]
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ConfigError(f"data.patches.{name}", v, f"an int >= {low}")
    if s["levels"] ** (s["patch"] ** 2) > MAX_CODES:
        raise ConfigError("data.patches.levels", s["levels"], f"levels ** (patch * patch) <= "
                          f"{MAX_CODES} codes (patch={s['patch']} gives "
                          f"{s['levels']}**{s['patch'] ** 2})")
    if s["positions"] is not None and s["positions"] not in POSITIONS:
        raise ConfigError("data.patches.positions", s["positions"],
                          "None (follow the position scheme), 'grid' or 'raster'")
    return s


def num_codes(s: dict) -> int:
    return s["levels"] ** (s["patch"] ** 2)


def code_names(s: dict) -> list[str]:
    """One vocabulary token per code: 'patch:' and its pixel levels, row-major."""
    n = s["patch"] ** 2
    return ["patch:" + "".join(str((c // s["levels"] ** i) % s["levels"]) for i in range(n))
            for c in range(num_codes(s))]


def grid_of(length: int, field: str = "data.seq_len") -> int:
    """The grid side g of a row of length g * g; ConfigError otherwise."""
    g = math.isqrt(length) if isinstance(length, int) and length > 0 else 0
    if g < 2 or g * g != length:
        raise ConfigError(field, length, "a square grid * grid >= 4 of patches (e.g. 64 for "
                          "8 x 8) with data.corpus='patches'")
    return g


def position_dims(config: Any) -> int:
    """1, 2 or 3: the coordinates per position the model's scheme takes."""
    from posjax.positions import scheme_class

    return scheme_class(config.position.name).position_dims


def grid_positions(config: Any) -> bool:
    """Whether rows carry grid positions [L, 2] or [L, 3] (else raster indices [L])."""
    chosen = settings(config)["positions"]
    if chosen is None:
        return position_dims(config) != 1
    return chosen == "grid"


def check(config: Any) -> None:
    """Everything the patches corpus needs of the config (validation.check_data calls it)."""
    d = schema.view(config).data
    tok = d.tokenizer
    if not is_patches(config):
        raise ConfigError("data.tokenizer", tok, "a text tokenizer: 'patch_codes' reads "
                          "images, with data.corpus='patches'")
    if tok != "patch_codes":
        raise ConfigError("data.tokenizer", tok, "'patch_codes' with data.corpus='patches'")
    s = settings(config)
    grid_of(d.seq_len)
    vocab = d.vocab_size
    size = len(code_names(s)) + 5
    if vocab is not None and vocab != size:
        raise ConfigError("data.vocab_size", vocab, f"None or {size} (5 specials + "
                          f"{num_codes(s)} patch codes)")
    for field, value in (("data.tasks", d.tasks),
                         ("data.randomized_max_length", d.randomized_max_length)):
        if value:
            raise ConfigError(field, value, "unset with data.corpus='patches'")
    model = schema.view(config).model
    for field in ("causal", "sop"):
        if model[field]:
            raise ConfigError(f"model.{field}", True, "False with data.corpus='patches' "
                              "(masked-patch modelling of one image per row)")
    dims = position_dims(config)
    if s["positions"] == "grid" and dims == 1:
        raise ConfigError("data.patches.positions", "grid", f"None or 'raster': position "
                          f"'{config.position.name}' takes 1-D positions, not (row, column)")
    if s["positions"] == "raster" and dims != 1:
        raise ConfigError("data.patches.positions", "raster", f"None or 'grid': position "
                          f"'{config.position.name}' takes grid positions")


# -- images ---------------------------------------------------------------------------------


def image(rng: np.random.Generator, size: int) -> np.ndarray:
    """One float [size, size] picture in [0, 1] (see the module docstring)."""
    yy, xx = np.mgrid[0:size, 0:size] + 0.5
    if rng.random() < 0.5:
        period, theta, phase = rng.uniform(3, 8), rng.uniform(0, np.pi), rng.uniform(0, 2 * np.pi)
        img = 0.5 + 0.5 * np.sin(2 * np.pi * (xx * np.cos(theta) + yy * np.sin(theta)) / period
                                 + phase)
    else:
        img = np.full((size, size), rng.uniform(0, 1))
    for _ in range(rng.poisson(size * size / 64)):
        cy, cx = rng.uniform(0, size, 2)
        a, b = rng.uniform(1.5, 5, 2)
        if rng.random() < 0.5:
            inside = (np.abs(xx - cx) <= a) & (np.abs(yy - cy) <= b)
        else:
            inside = ((xx - cx) / a) ** 2 + ((yy - cy) / b) ** 2 <= 1
        img[inside] = rng.uniform(0, 1)
    return img


def codes(img: np.ndarray, patch: int, levels: int) -> np.ndarray:
    """[g*g] int codes of the patches of img [g*patch, g*patch], raster order."""
    q = np.minimum((img * levels).astype(np.int64), levels - 1)
    g = img.shape[0] // patch
    tiles = q.reshape(g, patch, g, patch).transpose(0, 2, 1, 3).reshape(g * g, patch * patch)
    return (tiles * levels ** np.arange(patch * patch)).sum(-1)


def image_codes(s: dict, split: int, grid: int, index: int) -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence([s["seed"], 31, split, grid, index]))
    return codes(image(rng, grid * s["patch"]), s["patch"], s["levels"])


def grid_coordinates(grid: int, as_grid: bool, dims: int = 2) -> np.ndarray:
    """[L] raster indices, or [L, dims] grid positions: (row, column), with a frame t = 0
    in front for dims = 3."""
    idx = np.arange(grid * grid, dtype=np.int32)
    if as_grid:
        coords = [idx // grid, idx % grid]
        return np.stack([0 * idx] * (dims - 2) + coords, axis=-1).astype(np.int32)
    return idx


def make_row(config: Any, tokenizer, split: int, grid: int, index: int,
             mask_rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One image as a row of the batch contract, masked with `mask_rng`."""
    s = settings(config)
    ids = (image_codes(s, split, grid, index) + tokenizer.num_special).astype(np.int32)
    n = ids.size
    chosen = masking.choose(np.ones(n, bool), np.ones(n, bool), mask_rng,
                            masking.mask_rate(config), whole_word=False)
    inputs, targets, weights = masking.corrupt(
        ids, chosen, mask_rng, mask_id=tokenizer.mask_id, vocab_size=tokenizer.vocab_size,
        num_special=tokenizer.num_special)
    return {"input_ids": inputs, "token_type_ids": np.zeros(n, np.int32),
            "positions": grid_coordinates(grid, grid_positions(config), position_dims(config)),
            "segment_ids": np.ones(n, np.int32), "mlm_targets": targets,
            "mlm_weights": weights}


# -- the pipeline's three uses ----------------------------------------------------------------


def make_train_dataset(config: Any, tokenizer, seed: int, rows):
    """Training images in a seeded order, reshuffled every epoch, masks per (seed, epoch,
    image): as posjax.data.pipeline does for text rows (same iterator state, same resume)."""
    grid = grid_of(int(config.data.seq_len))
    per_epoch = settings(config)["images"]

    def build(index: int, image_index: int) -> dict[str, np.ndarray]:
        epoch = index // per_epoch
        return make_row(config, tokenizer, TRAIN, grid, int(image_index),
                        masking.row_rng(seed, epoch, int(image_index)))

    return shuffled_batches(per_epoch, seed, build, int(config.data.batch_size), rows)


def make_eval_batches(config: Any, tokenizer, num_batches: int) -> list[dict[str, np.ndarray]]:
    """`num_batches` batches of held-out images at the training grid, masks fixed."""
    grid, batch = grid_of(int(config.data.seq_len)), int(config.data.batch_size)
    rows = [make_row(config, tokenizer, HELDOUT, grid, j,
                     masking.row_rng(masking.EVAL_SEED, 0, j))
            for j in range(num_batches * batch)]
    return [{k: np.stack([r[k] for r in rows[b * batch:(b + 1) * batch]]) for k in rows[0]}
            for b in range(num_batches)]


def eval_rows(config: Any, tokenizer, length: int, masked_tokens: int, seed: int):
    """posjax.data.scored_rows.Rows for eval.py at length = grid * grid: held-out images with
    about `masked_tokens` masked patches in all (at least one image), masks fixed by `seed`.
    Each image is its own cluster (bootstrap unit); no row crosses anything."""
    grid = grid_of(length, "lengths")
    per_image = masking.max_predictions(length, masking.mask_rate(config))
    count = max(1, math.ceil(masked_tokens / per_image))
    rows = [make_row(config, tokenizer, HELDOUT, grid, j,
                     masking.row_rng(seed, 41, j)) for j in range(count)]
    arrays = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    return Rows(arrays=arrays,
                stream_index=np.broadcast_to(np.arange(length), (count, length)).copy(),
                cluster=np.arange(count, dtype=np.int32),
                crosses=np.zeros(count, bool))
