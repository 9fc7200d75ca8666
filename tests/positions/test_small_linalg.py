"""posjax.positions.small_linalg: the exponential and the Cayley solve of skew-symmetric
matrices against scipy (float64) and jax's LAPACK forms, values and gradients, and the
schemes built on them compile without a LAPACK call (the batched LU that can hang XLA's CPU
thread pool)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from posjax import positions
from posjax.attention import attend
from posjax.positions import registry, small_linalg
from posjax.positions.base import Dims


# compiled once per shape (the six scales below share one program); op by op, the squarings'
# loop dispatched every small op on its own
_expm_skew = jax.jit(small_linalg.expm_skew)


def _skew(shape, scale, seed=0):
    f = np.random.default_rng(seed).normal(size=shape) * scale
    return (f - np.swapaxes(f, -1, -2)).astype(np.float32)


@pytest.mark.parametrize("scale", [0.0, 1e-4, 0.1, 1.0, 10.0, 100.0])
def test_expm_skew_is_the_exponential(scale):
    a = _skew((16, 4, 4), scale)
    got = np.asarray(_expm_skew(jnp.asarray(a)), np.float64)
    want = np.stack([scipy.linalg.expm(x.astype(np.float64)) for x in a])
    # float32 rounding of angles up to ~|a|: the error grows with the norm, as jax's does
    np.testing.assert_allclose(got, want, atol=2e-6 * max(1.0, scale))
    np.testing.assert_allclose(np.swapaxes(got, -1, -2) @ got,
                               np.broadcast_to(np.eye(4), got.shape), atol=2e-6 * max(1.0, scale))


def test_each_matrix_is_scaled_by_its_own_norm():
    small, large = _skew((1, 3, 3), 1e-3), _skew((1, 3, 3), 50.0, seed=1)
    both = np.asarray(_expm_skew(jnp.asarray(np.concatenate([small, large]))))
    alone = np.asarray(_expm_skew(jnp.asarray(small)))
    np.testing.assert_allclose(both[:1], alone, atol=1e-7)  # the large one's squarings skip it
    np.testing.assert_allclose(both[1], scipy.linalg.expm(large[0].astype(np.float64)),
                               atol=1e-4)


def test_expm_skew_gradient_is_jax_expm_gradient():
    a = jnp.asarray(_skew((8, 4, 4), 1.0))
    w = jnp.asarray(np.random.default_rng(2).normal(size=(8, 4, 4)), jnp.float32)
    got = jax.jit(jax.grad(lambda a: (small_linalg.expm_skew(a) * w).sum()))(a)
    want = jax.jit(jax.grad(lambda a: (jax.scipy.linalg.expm(a) * w).sum()))(a)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_solve_eye_plus_skew_is_the_solve_with_its_gradient():
    s = jnp.asarray(_skew((6, 8, 8), 2.0))
    b = jnp.asarray(np.random.default_rng(3).normal(size=(6, 8, 5)), jnp.float32)
    eye = np.eye(8)
    want = np.linalg.solve(eye + np.asarray(s, np.float64), np.asarray(b, np.float64))
    np.testing.assert_allclose(small_linalg.solve_eye_plus_skew(s, b), want, atol=1e-5)
    got = jax.grad(lambda s: (small_linalg.solve_eye_plus_skew(s, b) ** 2).sum())(s)
    ref = jax.grad(lambda s: (jnp.linalg.solve(jnp.eye(8) + s, b) ** 2).sum())(s)
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def test_solve_unit_upper_is_the_triangular_solve_with_its_gradient():
    rng = np.random.default_rng(4)
    u = jnp.asarray(rng.normal(size=(3, 2, 12, 12)), jnp.float32)  # lower part and diagonal unread
    b = jnp.asarray(rng.normal(size=(3, 2, 12, 5)), jnp.float32)
    unit = np.triu(np.asarray(u, np.float64), 1) + np.eye(12)
    want = np.linalg.solve(unit, np.asarray(b, np.float64))
    np.testing.assert_allclose(small_linalg.solve_unit_upper(u, b), want, atol=1e-3, rtol=1e-4)

    def ref(u, b):
        return jax.scipy.linalg.solve_triangular(u, b, lower=False, unit_diagonal=True)

    w = jnp.asarray(rng.normal(size=b.shape), jnp.float32)
    for argnum in (0, 1):
        got = jax.grad(lambda *a: (small_linalg.solve_unit_upper(*a) * w).sum(), argnum)(u, b)
        exp = jax.grad(lambda *a: (ref(*a) * w).sum(), argnum)(u, b)
        np.testing.assert_allclose(got, exp, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("name", ["liere", "comrope", "string"])
def test_the_schemes_train_without_a_lapack_call(name):
    scheme = registry.scheme_class(name)().bind(Dims(num_heads=2, head_dim=8, hidden=16, max_length=16))
    params = scheme.init_layer(jax.random.key(0))
    q = jax.random.normal(jax.random.key(1), (1, 16, 2, 8))
    pos = jnp.stack(jnp.meshgrid(jnp.arange(4), jnp.arange(4), indexing="ij"), -1)
    pos = pos.reshape(1, 16, 2)

    def loss(params, q):
        rq, rk = scheme.rotate(params, q, q, pos, pos)
        return (rq * rk).sum()

    _assert_no_lapack(jax.grad(loss), params, q)


def test_path_trains_without_a_lapack_call():
    scheme = positions.make("path", chunk=8).bind(Dims(num_heads=2, head_dim=8, hidden=16,
                                                        max_length=64, causal=True))
    params = scheme.init_layer(jax.random.key(0))
    q = jax.random.normal(jax.random.key(1), (2, 64, 2, 8))

    def loss(params, q):
        return attend(q, q, q, scheme=scheme, params=params, causal=True,
                      implementation="chunked", block_q=32, block_k=32).sum()

    _assert_no_lapack(jax.grad(loss), params, q)


def _assert_no_lapack(fn, *args):
    text = jax.jit(fn).lower(*args).compile().as_text()
    targets = [line.split('custom_call_target="')[1].split('"')[0]
               for line in text.splitlines() if 'custom_call_target="' in line]
    assert not [t for t in targets if "lapack" in t or "getrf" in t], targets
