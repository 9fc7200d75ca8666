"""BERT's exact GELU (posjax.models.spec.gelu_erf) against its definition in float64."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from posjax.models.spec import ACTIVATIONS, gelu_erf

X = np.linspace(-12.0, 12.0, 4801)


def _gelu64(x):
    return np.array([0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in x])


def _dgelu64(x):
    return np.array([0.5 * (1.0 + math.erf(v / math.sqrt(2.0)))
                     + v * math.exp(-0.5 * v * v) / math.sqrt(2.0 * math.pi) for v in x])


def test_gelu_is_the_exact_erf_form_values_and_gradient():
    x = jnp.asarray(X, jnp.float32)
    ref = _gelu64(np.asarray(x, np.float64))
    out = np.asarray(gelu_erf(x), np.float64)
    # Absolute error ~1e-6 at most (float32 rounding, and 1 + erf cancelling for x < -4 where
    # |gelu| < 1e-4); relative error below 3e-5 wherever |gelu| > 0.01.
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-6)
    big = np.abs(ref) > 1e-2
    np.testing.assert_allclose(out[big], ref[big], rtol=3e-5)
    grad = np.asarray(jax.vmap(jax.grad(gelu_erf))(x), np.float64)
    np.testing.assert_allclose(grad, _dgelu64(np.asarray(x, np.float64)), rtol=0, atol=2e-6)
    # Not the tanh approximation: the two differ by ~1e-3 near |x| = 2.
    tanh = np.asarray(ACTIVATIONS["gelu_tanh"](x), np.float64)
    assert np.abs(tanh - ref).max() > 1e-4
    assert ACTIVATIONS["gelu"] is gelu_erf


def test_gelu_keeps_bfloat16():
    x = jnp.asarray(X[::40], jnp.bfloat16)
    out = gelu_erf(x)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float64), _gelu64(np.asarray(x, np.float64)),
                               rtol=1e-2, atol=1e-2)
