"""Building blocks: BERT init, float32 layer norm, mixed precision end to end."""

from __future__ import annotations

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import models
from posjax.attention import native
from posjax.models import cpu_ops
from posjax.models.layers import Dense, LayerNorm, cotangent_once, mlp_activation, stacked
from posjax.models.spec import ACTIVATIONS
from posjax.tiling import mixed

from tests.models.support import make_batch, model_config
from tests.numerics import BFLOAT16_RTOL, FLOAT32_RTOL, assert_close_in_norm


def test_bert_init():
    dense = Dense((256,), (4, 64), ("embed", "heads", "kv"), dtype=jnp.float32, rngs=nnx.Rngs(0))
    w = np.asarray(dense.kernel[...])
    assert w.shape == (256, 4, 64)
    # tf.truncated_normal_initializer(stddev=0.02), as BERT: N(0, 0.02) cut at 2 sigma, whose
    # std is 0.02 * 0.8796 (the truncation is not rescaled, in TF nor in jax).
    assert abs(w.std() - 0.02 * 0.87962566) < 0.001 and np.abs(w).max() <= 0.04 + 1e-7
    np.testing.assert_array_equal(dense.bias[...], 0)
    norm = LayerNorm(8, eps=1e-12, dtype=jnp.float32, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(norm.scale[...], 1)
    np.testing.assert_array_equal(norm.bias[...], 0)


def test_cotangent_once_is_the_identity_with_its_cotangent_materialized():
    # Values and gradients are exactly the identity's; the backward carries the barrier that
    # stops XLA from fusing the residual stream's chain of adds into every consumer.
    x = jnp.arange(6.0).reshape(2, 3)
    f = lambda x: jnp.sum(jnp.sin(cotangent_once(x)) * x)  # noqa: E731
    g = lambda x: jnp.sum(jnp.sin(x) * x)  # noqa: E731
    np.testing.assert_array_equal(f(x), g(x))
    np.testing.assert_array_equal(jax.grad(f)(x), jax.grad(g)(x))
    assert "optimization_barrier" in str(jax.make_jaxpr(jax.grad(f))(x))
    assert "optimization_barrier" not in str(jax.make_jaxpr(f)(x))


@pytest.mark.parametrize("glu", [False, True])
def test_activation_recomputed_in_the_backward_has_the_same_values_and_gradients(glu):
    # jax.checkpoint keeps only the projection h for the backward (not erf and its
    # products); values and gradients are the plain activation's.
    h = jax.random.normal(jax.random.key(0), (2, 5, 2, 8) if glu else (2, 5, 8))
    act = ACTIVATIONS["gelu"]
    plain = (lambda h: act(h[..., 0, :]) * h[..., 1, :]) if glu else act
    w = jax.random.normal(jax.random.key(1), plain(h).shape)
    loss = lambda f: lambda h: jnp.sum(f(h) * w)  # noqa: E731
    got = loss(lambda h: mlp_activation(h, "gelu", glu))
    np.testing.assert_allclose(got(h), loss(plain)(h), rtol=FLOAT32_RTOL)
    np.testing.assert_allclose(jax.grad(got)(h), jax.grad(loss(plain))(h), rtol=FLOAT32_RTOL,
                               atol=1e-6)
    assert "remat" in str(jax.make_jaxpr(jax.grad(got))(h))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_stacked_projections_equal_the_separate_ones(dtype):
    # q, k, v from one matmul of the stacked kernels (one input-gradient all-reduce under
    # tensor parallelism): the same values as three Dense calls up to the order of the sums
    # (another program: its blocking follows the CPU's vector width), and the same input
    # gradient up to the rounding of one sum instead of three.
    names = ("embed", "heads", "kv")
    rngs = nnx.Rngs(0)
    denses = [Dense((16,), (2, 8), names, dtype=dtype, rngs=rngs) for _ in range(3)]
    for i, d in enumerate(denses):
        d.bias[...] = jax.random.normal(jax.random.key(i), d.bias.shape)
    x = jax.random.normal(jax.random.key(9), (2, 12, 16)).astype(dtype)
    rtol = FLOAT32_RTOL if dtype == jnp.float32 else BFLOAT16_RTOL
    for sep, st in zip([d(x) for d in denses], stacked(denses, x, names)):
        assert st.dtype == sep.dtype and st.shape == (2, 12, 2, 8)
        assert_close_in_norm(np.asarray(st, np.float32), np.asarray(sep, np.float32), rtol)

    def loss(x, fused):
        ys = stacked(denses, x, names) if fused else [d(x) for d in denses]
        return sum(jnp.sum(y.astype(jnp.float32) * (j + 1)) for j, y in enumerate(ys))

    g_sep, g_st = (np.asarray(jax.grad(loss)(x, f), np.float32) for f in (False, True))
    tol = 1e-6 if dtype == jnp.float32 else 2e-2
    np.testing.assert_allclose(g_st, g_sep, rtol=tol, atol=tol)


@pytest.mark.parametrize("x_shape, kernel_shape, n", [
    ((2, 12, 16), (16, 3, 8), 1),   # a stacked projection: the input is the smaller operand
    ((2, 12, 3, 8), (3, 8, 16), 2),  # an output projection: two contracted axes
    ((2, 12, 40), (40, 8), 1),       # the cotangent is the smaller operand
])
@pytest.mark.skipif(not (os.environ.get("CXX") or shutil.which("c++")),
                    reason="no C++ compiler here: the kernel library is not built")
def test_the_cpu_weight_gradient_path_equals_mixed(x_shape, kernel_shape, n):
    # cpu_ops.dense (the weight gradient's operand transposed by the compiled kernel
    # library) against mixed.contract_last: the same products in the same layouts, so values
    # and gradients agree to float32 rounding.
    x = jax.random.normal(jax.random.key(1), x_shape)
    kernel = jax.random.normal(jax.random.key(2), kernel_shape)
    assert cpu_ops.dense_usable(x, kernel)

    def loss(product):
        return lambda a, b: jnp.sum(jnp.sin(product(a, b, n)))

    got = jax.jit(jax.value_and_grad(loss(cpu_ops.dense), argnums=(0, 1)))(x, kernel)
    want = jax.jit(jax.value_and_grad(loss(mixed.contract_last), argnums=(0, 1)))(x, kernel)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(g, w, rtol=FLOAT32_RTOL, atol=1e-5)


@pytest.mark.parametrize("use_bias", [True, False])
@pytest.mark.parametrize("shape", [(3, 37, 64), (1, 130, 37), (2, 5, 256)])
@pytest.mark.skipif(not (os.environ.get("CXX") or shutil.which("c++")),
                    reason="no C++ compiler here: the kernel library is not built")
def test_the_cpu_layer_norm_equals_its_definition_in_values_and_gradients(shape, use_bias):
    # The compiled library's layer norm (one pass per row; the backward's scale and bias
    # sums per strip of native.LAYER_NORM_ROWS rows) against the formula in float64: rows
    # that fill no whole strip, features off the vector width, no bias (ModernBERT).
    norm = LayerNorm(shape[-1], eps=1e-5, dtype=jnp.float32, rngs=nnx.Rngs(0),
                     use_bias=use_bias)
    norm.scale[...] = jax.random.uniform(jax.random.key(1), shape[-1:], minval=0.5, maxval=1.5)
    if use_bias:
        norm.bias[...] = jax.random.normal(jax.random.key(2), shape[-1:])
    x = jax.random.normal(jax.random.key(3), shape) * 2.0 + 0.5
    ct = jax.random.normal(jax.random.key(4), shape)
    graphdef, params = nnx.split(norm)
    assert cpu_ops.usable(x)
    assert native.LAYER_NORM in jax.jit(lambda x: nnx.merge(graphdef, params)(x)).lower(
        x).as_text()

    def loss(params, x):
        return jnp.sum(nnx.merge(graphdef, params)(x) * ct)

    value, (d_params, dx) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(params, x)
    x64, ct64 = np.asarray(x, np.float64), np.asarray(ct, np.float64)
    scale = np.asarray(norm.scale[...], np.float64)
    bias = np.asarray(norm.bias[...], np.float64) if use_bias else 0.0
    mean = x64.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat = (x64 - mean) * rstd
    g = ct64 * scale
    want_dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    np.testing.assert_allclose(value, np.sum((xhat * scale + bias) * ct64), rtol=1e-5)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(d_params["scale"][...], (ct64 * xhat).sum((0, 1)), rtol=1e-4,
                               atol=1e-4)
    if use_bias:
        np.testing.assert_allclose(d_params["bias"][...], ct64.sum((0, 1)), rtol=1e-4,
                                   atol=1e-4)


def test_layer_norm_computes_in_float32():
    norm = LayerNorm(4, eps=1e-12, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    # A large common offset: bfloat16 arithmetic would lose the small differences.
    x = jnp.asarray([[1000.0, 1001.0, 1002.0, 1003.0]], jnp.float32)
    y = norm(x)
    assert y.dtype == jnp.bfloat16
    expected = (np.arange(4) - 1.5) / np.sqrt(1.25)
    np.testing.assert_allclose(np.asarray(y, np.float32)[0], expected, atol=1e-2)


def test_layer_norm_on_one_row_equals_the_batched_one_in_values_and_gradients():
    # A batch of one takes the [L, E] view (faster reductions on CPU); it must be the same
    # function as the batched path, scale gradient (a sum over tokens) included.
    norm = LayerNorm(6, eps=1e-6, dtype=jnp.float32, rngs=nnx.Rngs(0))
    norm.scale[...] = jnp.linspace(0.5, 1.5, 6)
    x = jax.random.normal(jax.random.key(0), (1, 5, 6)) * 3.0 + 1.0
    graphdef, params = nnx.split(norm)

    def loss(params, x, rows):  # rows: how many copies of the one row go in
        y = nnx.merge(graphdef, params)(jnp.concatenate([x] * rows))
        return jnp.sum(jnp.sin(y[0]) * jnp.arange(6.0))

    one = jax.value_and_grad(loss, argnums=(0, 1))(params, x, 1)
    two = jax.value_and_grad(loss, argnums=(0, 1))(params, x, 2)
    assert norm(x).shape == (1, 5, 6)
    np.testing.assert_allclose(one[0], two[0], rtol=1e-6)
    for a, b in zip(jax.tree.leaves(one[1]), jax.tree.leaves(two[1])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rope", "t5"])
def test_bfloat16_compute_is_finite_and_close_to_float32(name):
    f32 = models.build_model(model_config(name), nnx.Rngs(0))
    bf16 = models.build_model(model_config(name, dtype="bfloat16"), nnx.Rngs(0))
    # Same rngs, same float32 parameters: only the compute dtype differs.
    for a, b in zip(jax.tree.leaves(nnx.state(f32, nnx.Param)),
                    jax.tree.leaves(nnx.state(bf16, nnx.Param))):
        assert b.dtype == jnp.float32
        np.testing.assert_array_equal(a, b)
    batch = make_batch()
    ref, low = f32(batch), bf16(batch)
    assert low["hidden"].dtype == jnp.bfloat16
    assert low["mlm_logits"].dtype == jnp.float32
    logits = np.asarray(low["mlm_logits"])
    assert np.isfinite(logits).all()
    err = np.abs(logits - np.asarray(ref["mlm_logits"])).max()
    assert err < 0.03 * np.abs(np.asarray(ref["mlm_logits"])).max(), err  # ~1% seen
    np.testing.assert_allclose(
        np.asarray(low["hidden"], np.float32), ref["hidden"], atol=0.05, rtol=0.05
    )
