"""Randomized positional encodings (Ruoss et al. 2023, "Randomized Positional Encodings Boost
Length Generalization of Transformers"; google-deepmind/randomized_positional_encodings).

During training each sequence of n tokens gets, instead of 0 .. n-1, a sorted random subset of
n distinct positions drawn from [0, max_length), where max_length is well beyond the training
length. The model thus sees position values (and distances) up to max_length while training
on short sequences; order is kept because the subset is sorted. At evaluation positions are
plain 0 .. n-1. The positions then feed any scheme through its position arrays, which is why
this is a function of positions and not a scheme of its own.

Packed rows (several examples per row) are not handled here: each row gets one subset.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from posjax.errors import ConfigError


def _positive_int(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ConfigError(field, value, "a positive integer")
    return int(value)


def randomized_positions(rng: jax.Array, batch: int, length: int, max_length: int) -> jax.Array:
    """int32 [batch, length]: per row a sorted random subset, without replacement, of
    [0, max_length). Rows are independent. ConfigError if length > max_length.

    Every candidate position gets an independent uniform score and each row keeps the `length`
    best (top_k returns distinct indices even on tied scores): a uniformly random subset,
    in O(max_length) per row. `batch`, `length`, `max_length` are static (Python ints).
    """
    batch = _positive_int(batch, "batch")
    length = _positive_int(length, "data.seq_len")
    max_length = _positive_int(max_length, "data.randomized_max_length")
    if length > max_length:
        raise ConfigError(
            "data.randomized_max_length", max_length,
            f"at least the sequence length {length} (positions are drawn without replacement)",
        )
    scores = jax.random.uniform(rng, (batch, max_length))
    _, chosen = jax.lax.top_k(scores, length)
    return jnp.sort(chosen, axis=-1).astype(jnp.int32)


def positions_for(
    rng: Optional[jax.Array], *, train: bool, batch: int, length: int,
    max_length: Optional[int] = None,
) -> jax.Array:
    """Positions int32 [batch, length] for one step.

    Randomized (see `randomized_positions`) when `train` and `max_length` is set (the config's
    data.randomized_max_length); 0 .. length-1 for every row otherwise, which is what
    evaluation always uses. `rng` may be None when no randomization happens.
    """
    if train and max_length is not None:
        if rng is None:
            raise ConfigError("rng", None, "a PRNG key when randomized positions are on")
        return randomized_positions(rng, batch, length, max_length)
    batch = _positive_int(batch, "batch")
    length = _positive_int(length, "data.seq_len")
    return jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))
