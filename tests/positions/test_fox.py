"""FoX (forgetting attention): reference and chunked against a direct definition that
multiplies the forget gates between every query and key (values and gradients, causal and
bidirectional), the defining property (a constant gate is a linear decay), the kernel path's
registration (the kernel itself is checked in tests/kernels/test_flash_fox.py) and bad fields."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import kernels, models, positions
from posjax.attention import attend, choose_implementation
from posjax.errors import ConfigError
from posjax.positions.base import Dims
from tests.models.support import model_config

B, L, H, D = 2, 9, 2, 4
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)
TOL = dict(rtol=2e-5, atol=2e-5)


def direct(q, k, v, params, causal):
    """softmax(q.k/sqrt(D) + log prod_{l between} f_l) v with the gates between i and j
    (j < l <= i; after the query i < l <= j) picked by an explicit [i, j, l] indicator."""
    gate = jax.nn.sigmoid(jnp.einsum("blhd,hd->bhl", k, params["w"]) + params["b"][:, None])
    i, j, l = np.ogrid[:L, :L, :L]
    between = ((np.minimum(i, j) < l) & (l <= np.maximum(i, j))).astype(np.float32)
    bias = jnp.einsum("ijl,bhl->bhij", between, jnp.log(gate))
    logits = jnp.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(D) + bias
    if causal:
        logits = jnp.where(np.tril(np.ones((L, L), bool)), logits, -np.inf)
    return jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits, -1), v)


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    q, k, v, ct = (jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))
    params = {"w": jnp.asarray(rng.randn(H, D), jnp.float32),
              "b": jnp.asarray(rng.randn(H) + 1.0, jnp.float32)}
    return q, k, v, ct, params


def test_matches_direct_definition_values_and_grads():
    q, k, v, ct, params = _inputs()

    # chunked == reference (values and gradients, bidirectional) is in tests/attention/test_attend.py
    # (registry case); here chunked runs causal, forward.
    def all_cases(q, k, v, params):
        out = {}
        for causal in (True, False):
            dims = dataclasses.replace(DIMS, causal=causal)
            scheme = positions.make("fox").bind(dims)
            fns = {impl: (lambda impl: lambda *a: attend(
                *a[:3], scheme=scheme, params=a[3], causal=causal, implementation=impl,
                block_q=4, block_k=4))(impl) for impl in ("reference", "chunked")[:2 if causal else 1]}
            fns["direct"] = lambda q, k, v, p: direct(q, k, v, p, causal)
            for name, f in fns.items():
                loss = lambda *a: (f(*a) * ct).sum()  # noqa: E731
                grads = None if name == "chunked" else jax.grad(loss, argnums=(0, 1, 2, 3))(
                    q, k, v, params)
                out[causal, name] = (f(q, k, v, params), grads)
        return out

    out = jax.jit(all_cases)(q, k, v, params)
    for causal in (True, False):
        want, want_grads = out[causal, "direct"]
        for impl in ("reference", "chunked")[:2 if causal else 1]:
            got, grads = out[causal, impl]
            np.testing.assert_allclose(got, want, err_msg=f"{impl} causal={causal}", **TOL)
            if grads is None:  # chunked: forward here (blocks of 4), gradients in tests/attention/test_attend.py
                continue
            for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
                np.testing.assert_allclose(a, b, err_msg=f"{impl} grads causal={causal}", **TOL)


def test_constant_gate_is_a_linear_decay():
    # w = 0: every gate is sigmoid(b), so the bias is log(sigmoid(b)) * |i - j|.
    q, k, v, _, params = _inputs(seed=1)
    params = {"w": jnp.zeros_like(params["w"]), "b": params["b"]}
    scheme = positions.make("fox").bind(DIMS)
    logits = jnp.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(D)
    dist = np.abs(np.arange(L)[:, None] - np.arange(L)[None, :])
    slope = jax.nn.log_sigmoid(params["b"])[:, None, None]
    want = jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits + slope * dist, -1), v)
    got = jax.jit(lambda q, k, v: attend(q, k, v, scheme=scheme, params=params,
                                         implementation="reference"))(q, k, v)
    np.testing.assert_allclose(got, want, **TOL)


def test_kernel_path_and_bad_fields():
    # FoX is fused in the kernel (its sums c are kernel inputs): 'kernel' runs it, and a
    # model may ask for it.
    q, k, v, _, params = _inputs()
    scheme = positions.make("fox").bind(DIMS)
    assert kernels.supports(scheme) and kernels.refusal(scheme) is None
    assert choose_implementation("kernel", scheme, L) == "kernel"
    models.validate_model_config(model_config({"name": "fox"}, attention="kernel"))
    with pytest.raises(ConfigError, match="position.gate_bias"):
        positions.make("fox", gate_bias="high")
    with pytest.raises(ConfigError, match="q.shape.*self-attention"):
        attend(q[:, :4], k, v, scheme=scheme, params=params, implementation="reference")
