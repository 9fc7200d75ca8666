"""posjax/positions/prefix.py: the triangular product (short tiles) and the scan (long rows)
give numpy's prefix sums, inclusive and exclusive, and the gradient of a prefix sum."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax.positions.prefix import DOT_MAX, prefix_sum


@pytest.mark.parametrize("n", [1, 7, DOT_MAX, DOT_MAX + 3])
@pytest.mark.parametrize("exclusive", [False, True])
def test_prefix_sums_match_numpy(n, exclusive):
    x = np.random.default_rng(n).normal(size=(2, 3, 5, n)).astype(np.float32)
    want = np.cumsum(x.astype(np.float64), axis=-1)
    if exclusive:
        want = np.concatenate([np.zeros_like(want[..., :1]), want[..., :-1]], axis=-1)
    got = prefix_sum(jnp.asarray(x), exclusive=exclusive)
    assert got.shape == x.shape and got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [9, DOT_MAX + 1])
def test_the_gradient_is_the_reversed_prefix_sum(n):
    """d/dx_i of sum_j w_j S_j: the weights of the sums that hold x_i, i.e. sum_{j >= i} w_j
    (exclusive: j > i)."""
    rng = np.random.default_rng(0)
    x, w = (rng.normal(size=(4, n)).astype(np.float32) for _ in range(2))
    for exclusive in (False, True):
        grad = jax.grad(lambda x: jnp.sum(prefix_sum(x, exclusive) * w))(jnp.asarray(x))
        want = np.cumsum(w[:, ::-1], axis=-1)[:, ::-1]
        if exclusive:
            want = want - w
        np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-5, atol=1e-5)
