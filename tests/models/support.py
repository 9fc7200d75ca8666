"""Shared helpers for posjax.models tests: tiny configs and batch-contract batches.

A plain module, not a conftest: `from conftest import ...` resolves to whichever conftest.py
was imported first, which depends on the order pytest collects directories.

Every test uses the same tiny dims (hidden 32, 4 heads of 8, 2 layers, vocab 50, length 16) so
that JAX's per-shape op caches are shared across tests and few things compile.
"""

from __future__ import annotations

import ml_collections
import numpy as np

VOCAB = 50
LENGTH = 16
BATCH = 2


def model_config(position="learned", **model) -> ml_collections.ConfigDict:
    """configs/base.py:tiny with vocab filled in, length 16, dropout on, and overrides."""
    from configs import base

    config = base.get_config("tiny")
    config.model.vocab_size = VOCAB
    config.model.max_length = 32
    config.data.seq_len = LENGTH
    for key, value in model.items():
        config.model[key] = value
    if isinstance(position, str):
        position = {"name": position}
    config.position = ml_collections.ConfigDict(position)
    return config


def make_batch(seed=0, batch=BATCH, length=LENGTH, segments=None, real=None):
    """A batch-contract batch. `segments`: list of example lengths packed in every row;
    `real`: number of real tokens per row (rest padding). Default: one example, full row."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, (batch, length)).astype(np.int32)
    seg = np.zeros((batch, length), np.int32)
    pos = np.zeros((batch, length), np.int32)
    lengths = segments if segments is not None else [length if real is None else real]
    start = 0
    for i, n in enumerate(lengths):
        seg[:, start : start + n] = i + 1
        pos[:, start : start + n] = np.arange(n)
        start += n
    ids[seg == 0] = 0
    return {
        "input_ids": ids,
        "token_type_ids": np.zeros((batch, length), np.int32),
        "positions": pos,
        "segment_ids": seg,
        "mlm_targets": np.zeros((batch, length), np.int32),
        "mlm_weights": np.zeros((batch, length), np.float32),
    }



def layer_hook_grads(config, batch) -> list[dict]:
    """Each layer's position-hook parameter gradients ({name: array}) of one MLM logit summed
    over `batch`, through the whole model built from `config`: a learned hook parameter that
    receives no gradient here is cut off from the loss."""
    import jax
    from flax import nnx

    from posjax import models

    model = models.build_model(config, nnx.Rngs(0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(params):
        return nnx.merge(graphdef, params, rest)(batch)["mlm_logits"][..., 7].sum()

    grads = nnx.to_pure_dict(jax.jit(jax.grad(loss))(params))
    layers = grads["encoder"]["layers"]
    assert len(layers) == config.model.num_layers
    return [layer["hook"]["tree"] for layer in layers.values()]
