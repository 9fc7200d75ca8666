"""Randomized positions (Ruoss et al. 2023): sorted, distinct, in range, random per row and
per seed, arange at evaluation, bad sizes rejected before anything runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax.errors import ConfigError
from posjax.positions import randomized_positions as exported
from posjax.positions.randomized import positions_for, randomized_positions


def test_sorted_unique_in_range():
    pos = np.asarray(randomized_positions(jax.random.PRNGKey(0), 6, 10, 40))
    assert pos.shape == (6, 10) and pos.dtype == np.int32
    assert np.all(np.diff(pos, axis=-1) > 0)  # strictly increasing: sorted and distinct
    assert pos.min() >= 0 and pos.max() < 40


def test_random_across_rows_and_seeds():
    a = np.asarray(randomized_positions(jax.random.PRNGKey(1), 4, 8, 512))
    b = np.asarray(randomized_positions(jax.random.PRNGKey(2), 4, 8, 512))
    assert len({tuple(row) for row in a}) == 4  # rows differ
    assert not np.array_equal(a, b)  # seeds differ
    again = np.asarray(randomized_positions(jax.random.PRNGKey(1), 4, 8, 512))
    np.testing.assert_array_equal(a, again)  # same seed, same positions


def test_covers_the_whole_range():
    # Uniform subsets: over many rows every position in [0, max_length) shows up, including
    # the ones far past the sequence length, which is the point of the method.
    pos = np.asarray(randomized_positions(jax.random.PRNGKey(3), 64, 8, 32))
    assert set(pos.ravel().tolist()) == set(range(32))


def test_length_equal_to_max_length_is_arange():
    pos = randomized_positions(jax.random.PRNGKey(4), 2, 16, 16)
    np.testing.assert_array_equal(pos, np.broadcast_to(np.arange(16), (2, 16)))


def test_jittable_with_static_sizes():
    fn = jax.jit(randomized_positions, static_argnums=(1, 2, 3))
    key = jax.random.PRNGKey(5)
    np.testing.assert_array_equal(fn(key, 3, 5, 50), randomized_positions(key, 3, 5, 50))


def test_positions_for_train_and_eval():
    key = jax.random.PRNGKey(6)
    train = positions_for(key, train=True, batch=2, length=5, max_length=100)
    np.testing.assert_array_equal(train, randomized_positions(key, 2, 5, 100))
    arange = np.broadcast_to(np.arange(5, dtype=np.int32), (2, 5))
    evaluation = positions_for(key, train=False, batch=2, length=5, max_length=100)
    np.testing.assert_array_equal(evaluation, arange)
    assert evaluation.dtype == jnp.int32
    off = positions_for(None, train=True, batch=2, length=5, max_length=None)
    np.testing.assert_array_equal(off, arange)


def test_exported_from_package():
    assert exported is randomized_positions


@pytest.mark.parametrize(
    "batch, length, max_length, field",
    [
        (2, 10, 8, "data.randomized_max_length"),
        (2, 10, 0, "data.randomized_max_length"),
        (2, 0, 8, "data.seq_len"),
        (0, 4, 8, "batch"),
        (2, 4.0, 8, "data.seq_len"),
    ],
)
def test_bad_sizes(batch, length, max_length, field):
    with pytest.raises(ConfigError, match=field):
        randomized_positions(jax.random.PRNGKey(0), batch, length, max_length)


def test_positions_for_needs_a_key_when_randomizing():
    with pytest.raises(ConfigError, match="rng"):
        positions_for(None, train=True, batch=1, length=4, max_length=8)
