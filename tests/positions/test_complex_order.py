"""Tests for posjax/positions/complex_order.py (Wang et al. 2020, complex order embeddings)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from posjax.errors import ConfigError
from posjax.positions import make
from posjax.positions.base import Dims
from posjax.positions.complex_order import ComplexOrder, complex_order_embedding

DIMS = Dims(num_heads=2, head_dim=4, hidden=8, max_length=16, vocab_size=11)


def _numpy_complex(x, pos, ids, freq, phase):
    # The definition with numpy complex numbers: a = re + i*im, z = a * exp(i(w*pos + theta)).
    x, freq, phase = (np.asarray(a, np.float64) for a in (x, freq, phase))
    half = x.shape[-1] // 2
    a = x[..., :half] + 1j * x[..., half:]
    z = a * np.exp(1j * (freq[ids] * np.asarray(pos)[..., None] + phase[ids]))
    return np.concatenate([z.real, z.imag], -1)


def _random_params(seed=0, vocab=11, half=4):
    k1, k2 = jax.random.split(jax.random.key(seed))
    return {
        "freq": jax.random.uniform(k1, (vocab, half), minval=0.0, maxval=1.0),
        "phase": jax.random.uniform(k2, (vocab, half), minval=-np.pi, maxval=np.pi),
    }


def test_registry_paths():
    assert type(make("complex_order")) is ComplexOrder


def test_init_is_sinusoid_frequencies_zero_phase_identity_at_zero():
    scheme = make("complex_order")
    scheme = scheme.bind(DIMS)
    params = scheme.init_embed(jax.random.key(0))
    assert params["freq"].shape == (11, 4) and params["phase"].shape == (11, 4)
    assert params["freq"].dtype == jnp.float32
    # FreedomIntelligence/complex-order get_sinusoid_encoding_table: 1/10000**(2j/d) per word
    np.testing.assert_allclose(params["freq"][3], 10000.0 ** (-np.arange(4) / 4), rtol=1e-6)
    np.testing.assert_array_equal(params["phase"], 0.0)
    x = jax.random.normal(jax.random.key(1), (2, 3, 8))
    ids = jnp.array([[1, 2, 3], [4, 5, 6]])
    np.testing.assert_allclose(
        scheme.embed(params, x, jnp.zeros((2, 3), jnp.int32), ids), x, atol=1e-7
    )


def test_matches_complex_definition():
    scheme = make("complex_order")
    params = _random_params()
    x = jax.random.normal(jax.random.key(2), (2, 5, 8))
    pos = jnp.array([[0, 1, 2, 3, 4], [7, 100, 3, 3, 0]])
    ids = jnp.array([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    got = scheme.embed(params, x, pos, ids)
    np.testing.assert_allclose(
        got, _numpy_complex(x, pos, ids, params["freq"], params["phase"]), atol=2e-5
    )


def test_modulus_independent_of_position():
    params = _random_params(1)
    x = jax.random.normal(jax.random.key(3), (1, 1, 8))
    ids = jnp.array([[4]])

    def modulus(p):
        out = complex_order_embedding(
            x, jnp.array([[p]]), params["freq"][ids], params["phase"][ids]
        )
        return np.hypot(out[..., :4], out[..., 4:])

    m0 = modulus(0)
    np.testing.assert_allclose(m0, np.hypot(x[..., :4], x[..., 4:]), rtol=1e-5)
    for p in (1, 17, 513, 9000):
        np.testing.assert_allclose(modulus(p), m0, rtol=1e-5)


def test_inner_product_depends_only_on_position_difference():
    # Two different words with the same frequencies (different phases and amplitudes):
    # <e(w1, p1), e(w2, p2)> is a function of p1 - p2 only.
    params = _random_params(2)
    params["freq"] = jnp.broadcast_to(params["freq"][0], params["freq"].shape)
    scheme = make("complex_order")
    x = jax.random.normal(jax.random.key(4), (1, 2, 8))
    ids = jnp.array([[3, 9]])

    def dot(p1, p2):
        out = scheme.embed(params, x, jnp.array([[p1, p2]]), ids)
        return float(jnp.dot(out[0, 0], out[0, 1]))

    base = dot(5, 2)
    for shift in (1, 10, 50):
        assert dot(5 + shift, 2 + shift) == pytest.approx(base, abs=1e-4)
    assert abs(dot(5, 3) - base) > 1e-3  # but it does depend on the difference
    # different frequencies: the translation invariance is gone
    params2 = _random_params(2)
    out = lambda p1, p2: scheme.embed(params2, x, jnp.array([[p1, p2]]), ids)  # noqa: E731
    d0 = jnp.dot(out(5, 2)[0, 0], out(5, 2)[0, 1])
    d1 = jnp.dot(out(15, 12)[0, 0], out(15, 12)[0, 1])
    assert abs(float(d0 - d1)) > 1e-3


def test_checks():
    scheme = make("complex_order")
    with pytest.raises(ConfigError, match="model.hidden=7"):
        scheme.check(Dims(1, 7, 7, 16, vocab_size=5), 4)
    with pytest.raises(ConfigError, match="model.hidden=7"):
        scheme.bind(Dims(1, 7, 7, 16, vocab_size=5)).init_embed(jax.random.key(0))
    with pytest.raises(ConfigError, match="model.vocab_size=0"):
        scheme.bind(Dims(1, 8, 8, 16)).init_embed(jax.random.key(0))
    with pytest.raises(ConfigError, match="position.base"):
        make("complex_order", base=-1)
    scheme.check(DIMS, 10**6)  # any length


def test_out_of_vocabulary_id_is_nan_inside_jit():
    scheme = make("complex_order")
    scheme = scheme.bind(DIMS)
    params = scheme.init_embed(jax.random.key(0))
    x = jnp.ones((1, 3, 8))
    out = jax.jit(scheme.embed)(params, x, jnp.array([[1, 2, 3]]), jnp.array([[10, 11, -1]]))
    assert np.isfinite(out[0, 0]).all() and np.isnan(out[0, 1:]).all()


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_dtype(dtype):
    scheme = make("complex_order")
    params = _random_params(3)
    x = jax.random.normal(jax.random.key(5), (2, 4, 8)).astype(dtype)
    pos = jnp.array([[0, 1, 2, 3], [256, 257, 258, 4000]])
    ids = jnp.array([[0, 1, 2, 3], [4, 5, 6, 7]])
    out = scheme.embed(params, x, pos, ids)
    assert out.dtype == dtype
    want = _numpy_complex(np.asarray(x, np.float32), pos, ids, params["freq"], params["phase"])
    # float32 angles near 4000 rad carry ~2.4e-4 rounding; bf16 outputs carry ~1%.
    np.testing.assert_allclose(
        np.asarray(out, np.float32), want, atol=5e-2 if dtype == jnp.bfloat16 else 1e-3
    )


def test_gradients_of_frequency_and_phase_tables():
    with jax.enable_x64(True):
        scheme = make("complex_order")
        k1, k2, k3, k4 = jax.random.split(jax.random.key(6), 4)
        freq = jax.random.uniform(k1, (5, 2), jnp.float64)
        phase = jax.random.uniform(k2, (5, 2), jnp.float64)
        x = jax.random.normal(k3, (2, 3, 4), jnp.float64)
        w = jax.random.normal(k4, (2, 3, 4), jnp.float64)
        pos = jnp.array([[0, 1, 2], [3, 7, 2]])
        ids = jnp.array([[0, 1, 1], [4, 2, 0]])

        def loss(freq, phase, x):
            return jnp.sum(scheme.embed({"freq": freq, "phase": phase}, x, pos, ids) * w)

        check_grads(loss, (freq, phase, x), order=1, modes=("rev",))
        # words never seen get zero gradient
        g = jax.grad(loss, argnums=(0, 1))(freq, phase, x)
        np.testing.assert_array_equal(g[0][3], 0.0)
        np.testing.assert_array_equal(g[1][3], 0.0)
