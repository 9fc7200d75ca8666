"""Learned attention sinks (gpt-oss, x-transformers): one extra logit per head in every row's
softmax denominator, with no value. The reference against a direct numpy definition; chunked
and the Pallas kernel (interpret mode) against the reference, values and gradients of q, k, v
and the sinks themselves, with a window, padding and a query that has no key."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import posjax.kernels  # noqa: F401  registers implementation='kernel' with attend
from posjax.attention import attend
from posjax.errors import ConfigError

B, L, H, D = 2, 20, 2, 16
TOL = dict(rtol=2e-4, atol=2e-5)
SINKS = jnp.asarray([0.7, -1.5], jnp.float32)


def _inputs(seed=0):
    keys = jax.random.split(jax.random.key(seed), 4)
    return [jax.random.normal(kk, (B, L, H, D), jnp.float32) for kk in keys]


def _direct(q, k, v, sinks, allowed):
    """softmax over [logits of the allowed keys, sink] in float64; the sink has no value."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D)
    e = np.where(allowed, np.exp(logits), 0.0)
    total = e.sum(-1, keepdims=True) + np.exp(np.asarray(sinks, np.float64))[None, :, None, None]
    return np.einsum("bhqk,bkhd->bqhd", e / total, v)


def test_reference_matches_direct_definition():
    q, k, v, _ = _inputs()
    kv_mask = jnp.arange(L)[None] < jnp.asarray([[L], [L - 4]])
    seg = jnp.asarray([[1] * L, [1] * (L - 2) + [2] * 2])  # row 1's last queries: no real key
    out = attend(q, k, v, kv_mask=kv_mask, segment_ids=(seg, seg), sinks=SINKS,
                 implementation="reference")
    allowed = (np.asarray(kv_mask)[:, None, None, :]
               & (np.asarray(seg)[:, :, None] == np.asarray(seg)[:, None, :])[:, None])
    np.testing.assert_allclose(out, _direct(q, k, v, SINKS, allowed), **TOL)
    assert float(jnp.abs(out[1, -2:]).max()) == 0.0  # no key: output 0 (the sink has no value)
    # the sink changes the answer
    plain = attend(q, k, v, kv_mask=kv_mask, implementation="reference")
    assert not np.allclose(plain, out, atol=1e-3)


@pytest.mark.parametrize("impl,window,causal", [("chunked", None, False), ("chunked", 6, True),
                                                ("kernel", 7, False)])
def test_paths_match_reference_values_and_grads(impl, window, causal):
    q, k, v, cot = _inputs(1)
    kv_mask = jnp.arange(L)[None] < jnp.asarray([[L - 3], [L]])

    def loss(impl, q, k, v, sinks):
        out = attend(q, k, v, kv_mask=kv_mask, causal=causal, window=window, sinks=sinks,
                     implementation=impl, block_q=8, block_k=8)
        return jnp.sum(out * cot), out

    def run(impl):
        grad = jax.grad(lambda *a: loss(impl, *a), argnums=(0, 1, 2, 3), has_aux=True)
        return jax.jit(grad)(q, k, v, SINKS)

    got_g, got = run(impl)
    ref_g, ref = run("reference")
    np.testing.assert_allclose(got, ref, **TOL)
    for name, a, b in zip(("dq", "dk", "dv", "dsinks"), got_g, ref_g):
        np.testing.assert_allclose(a, b, err_msg=name, **TOL)
    assert float(jnp.abs(ref_g[3]).min()) > 0  # the sinks really get a gradient


@pytest.mark.parametrize("sinks", [jnp.zeros((3,)), jnp.zeros((H,), jnp.int32), [0.0, 0.0]])
def test_bad_sinks(sinks):
    q, k, v, _ = _inputs()
    with pytest.raises(ConfigError) as e:
        attend(q, k, v, sinks=sinks)
    assert e.value.field == "sinks"
