"""posjax.models.layers.keep_mask: dropout's counter-hash mask keeps each element with the
stated probability, independently of its neighbours, of other keys and of other sites."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax.models.layers import dropout, keep_mask

SHAPE = (64, 80, 64)  # 327,680 elements: a binomial sd of ~0.0005 at rate 0.1


@pytest.mark.parametrize("rate", [0.05, 0.1, 0.5, 0.9])
def test_keep_fraction_matches_rate(rate):
    keep, keep_prob = keep_mask(jax.random.key(0), rate, SHAPE)
    assert keep.shape == SHAPE and keep.dtype == jnp.bool_
    assert keep_prob == pytest.approx(1 - rate, abs=1e-9)
    n = np.prod(SHAPE)
    sd = np.sqrt(rate * (1 - rate) / n)
    assert abs(float(keep.mean()) - (1 - rate)) < 5 * sd


def test_masks_are_independent_across_keys_and_neighbours():
    a = np.asarray(keep_mask(jax.random.key(1), 0.5, SHAPE)[0], np.float64).ravel()
    b = np.asarray(keep_mask(jax.random.key(2), 0.5, SHAPE)[0], np.float64).ravel()
    limit = 5 / np.sqrt(a.size)  # 5 sd of a correlation of independent coins
    assert abs(np.corrcoef(a, b)[0, 1]) < limit  # two keys (two sites, two steps)
    for lag in (1, 2, 64, 80 * 64):  # the next element, feature, token, row
        assert abs(np.corrcoef(a[:-lag], a[lag:])[0, 1]) < limit
    # no key shares its mask with another: a different key is not a shifted copy
    assert not np.array_equal(a, b) and not np.array_equal(a[1:], b[:-1])


def test_same_key_same_mask():
    k = jax.random.key(7)
    assert np.array_equal(keep_mask(k, 0.1, SHAPE)[0], keep_mask(k, 0.1, SHAPE)[0])


def test_dropout_scales_kept_values_by_the_exact_keep_probability():
    x = jnp.ones(SHAPE, jnp.float32)
    rngs = nnx.Rngs(dropout=3)
    y = np.asarray(dropout(x, 0.1, False, rngs))
    kept = y[y != 0]
    _, keep_prob = keep_mask(jax.random.key(0), 0.1, SHAPE)
    np.testing.assert_allclose(kept, 1 / keep_prob, rtol=1e-7)
    # the expectation is unchanged: E[y] = 1 within the binomial's spread
    assert abs(y.mean() - 1) < 5 * np.sqrt(0.1 / 0.9 / y.size)
    assert dropout(x, 0.1, True, rngs) is x and dropout(x, 0.0, False, rngs) is x


def test_gradient_passes_kept_elements_only():
    x = jnp.linspace(-1, 1, 4096, dtype=jnp.float32).reshape(64, 64)
    key = jax.random.key(5)
    _, keep_prob = keep_mask(key, 0.3, x.shape)
    y = dropout(x, 0.3, False, nnx.Rngs(dropout=key))
    g = np.asarray(jax.grad(
        lambda x: jnp.sum(dropout(x, 0.3, False, nnx.Rngs(dropout=key)) * 2.0))(x))
    # the gradient flows exactly where the forward kept the value, scaled like it
    kept = np.asarray(y) != 0
    np.testing.assert_allclose(g[kept], 2 / keep_prob, rtol=1e-6)
    assert np.all(g[~kept] == 0)
    assert 0.6 < kept.mean() < 0.8
