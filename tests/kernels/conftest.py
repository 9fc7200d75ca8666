"""Shared helpers of the kernel tests (fixture `kc`): inputs, schemes and the comparison of
posjax.kernels.flash_attention (Pallas interpret mode on CPU) against the reference.

The reference is posjax.attention.attend(implementation='reference'), the readable definition
that materializes [B, H, Lq, Lk] logits; JAX differentiates it, so comparing the kernel's
custom_vjp gradients with it is the gradient check (q, k, v and the scheme's learnable params:
KERPLE r1/r2, T5 table, Shaw tables).

Interpret mode compiles every kernel grid into XLA loops and is slow: each case jits ONE
function returning the output and all gradients, shapes are tiny (H=2, D=16, L <= 40,
blocks 16), and lengths are NOT block multiples so the padding path always runs. The cases
are split over several files so each stays well under a minute on 2 busy cores.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax.attention import attend
from posjax.kernels import flash_attention
from posjax.kernels.cases import bind_case

H, D = 2, 16
F32_TOL = dict(rtol=2e-4, atol=2e-5)
# bf16: q.k, p@v and the rotated q/k are rounded to bf16; the kernel rounds UNnormalized tile
# probabilities where the reference rounds normalized ones (about 3 significant digits).
BF16_TOL = dict(rtol=5e-2, atol=5e-2)


def _inputs(batch, len_q, len_k, dtype, seed=0, dim=D):
    keys = jax.random.split(jax.random.PRNGKey(seed), 4)
    q = jax.random.normal(keys[0], (batch, len_q, H, dim), jnp.float32).astype(dtype)
    k = jax.random.normal(keys[1], (batch, len_k, H, dim), jnp.float32).astype(dtype)
    v = jax.random.normal(keys[2], (batch, len_k, H, dim), jnp.float32).astype(dtype)
    cot = jax.random.normal(keys[3], (batch, len_q, H, dim), jnp.float32).astype(dtype)
    return q, k, v, cot


def _value_and_grads(impl, scheme, params, q, k, v, cot, kwargs, kernel_kwargs=None):
    """Output and d(sum(out * cot)) w.r.t. q, k, v, params, in ONE jitted function."""

    def loss(q, k, v, params):
        if impl == "kernel":
            out = flash_attention(q, k, v, scheme=scheme, params=params, block_q=16,
                                  block_k=16, **kwargs, **(kernel_kwargs or {}))
        else:
            out = attend(q, k, v, scheme=scheme, params=params, implementation="reference",
                         **kwargs)
        return jnp.sum(out.astype(jnp.float32) * cot.astype(jnp.float32)), out

    grad = jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True)
    grads, out = jax.jit(grad)(q, k, v, params)
    return out, grads


def _compare(scheme, params, q, k, v, cot, tol, learnable=False, kernel_kwargs=None, **kwargs):
    """kernel_kwargs go to flash_attention only (e.g. layout='tpu'), kwargs to both."""
    out_k, g_k = _value_and_grads("kernel", scheme, params, q, k, v, cot, kwargs, kernel_kwargs)
    out_r, g_r = _value_and_grads("reference", scheme, params, q, k, v, cot, kwargs)
    assert out_k.dtype == q.dtype and out_k.shape == q.shape
    assert bool(jnp.all(jnp.isfinite(out_k.astype(jnp.float32))))
    np.testing.assert_allclose(np.asarray(out_k, np.float32), np.asarray(out_r, np.float32), **tol)
    names = ("dq", "dk", "dv")
    for name, a, b in zip(names, g_k[:3], g_r[:3]):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                                   err_msg=name, **tol)
    flat_k, _ = jax.tree_util.tree_flatten_with_path(g_k[3])
    flat_r = jax.tree.leaves(g_r[3])
    for (path, a), b in zip(flat_k, flat_r):
        if a.size:
            # Learnable params must really get a gradient (constants like ALiBi slopes: 0).
            assert learnable == (float(jnp.abs(b).max()) > 0), path
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), err_msg=str(path), **tol)
    return out_k


def _scheme(config, seed=1, dim=D):
    """(scheme bound to [H, dim] heads, its layer params)."""
    scheme = bind_case(config, H, dim, 256)
    return scheme, scheme.init_layer(jax.random.PRNGKey(seed))


def _lengths_mask(batch, length, valid):
    return jnp.arange(length)[None, :] < jnp.asarray(valid)[:, None]


@pytest.fixture
def kc():
    """The helpers above as one namespace: kc.inputs, kc.scheme, kc.compare, kc.mask, tols."""
    return types.SimpleNamespace(inputs=_inputs, scheme=_scheme, compare=_compare,
                                 mask=_lengths_mask, F32_TOL=F32_TOL, BF16_TOL=BF16_TOL, H=H, D=D)
