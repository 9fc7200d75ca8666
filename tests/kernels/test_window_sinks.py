"""Local layers (sliding window) and learned attention sinks in the Pallas kernels, interpret
mode on CPU, against the reference: values and gradients (q, k, v, learnable scheme params
and the sinks), in the 'flat' (Triton) and 'tpu' (Mosaic) layouts."""

from __future__ import annotations

import jax
import pytest
import jax.numpy as jnp
import numpy as np

from posjax.attention import attend
from posjax.kernels import flash_attention


@pytest.mark.slow
def test_flat_window_segments_logn(kc):
    # Encoder window (|i - j| <= 5) by position, packed segments, padding, log-n counting
    # the keys inside the window; 3 x 3 tiles of 16, most of them outside every window.
    scheme, params = kc.scheme({"name": "kerple", "variant": "log"})
    q, k, v, cot = kc.inputs(2, 40, 40, jnp.float32, seed=31)
    seg = jnp.asarray([[1] * 25 + [2] * 15, [1] * 40], jnp.int32)
    pos = jnp.concatenate([jnp.arange(25), jnp.arange(15)])[None].repeat(2, 0).astype(jnp.int32)
    pos = pos.at[1].set(jnp.arange(40))
    out = kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=True, window=10,
                     q_pos=pos, k_pos=pos, segment_ids=(seg, seg), logn_length=16,
                     kv_mask=kc.mask(2, 40, [40, 36]))
    full = attend(q, k, v, scheme=scheme, params=params, q_pos=pos, k_pos=pos,
                  segment_ids=(seg, seg), logn_length=16, kv_mask=kc.mask(2, 40, [40, 36]),
                  implementation="reference")
    assert not np.allclose(out, full, atol=1e-3)  # the window mattered


def test_tpu_layout_causal_window_and_sinks(kc):
    # 'tpu' layout: blocks of 128, two query and two key blocks (150 tokens, padded tail);
    # backward-only window of 40: the far off-diagonal tile is empty and skipped.
    scheme, params = kc.scheme({"name": "alibi"})
    q, k, v, cot = kc.inputs(1, 150, 150, jnp.float32, seed=32)
    sinks = jnp.asarray([0.5, -2.0], jnp.float32)
    kw = dict(scheme=scheme, params=params, causal=True, window=40,
              kv_mask=kc.mask(1, 150, [147]))

    def grads(impl):
        def loss(q, k, v, sinks):
            if impl == "kernel":
                out = flash_attention(q, k, v, sinks=sinks, layout="tpu", block_q=128,
                                      block_k=128, **kw)
            else:
                out = attend(q, k, v, sinks=sinks, implementation="reference", **kw)
            return jnp.sum(out * cot), out
        return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True))(q, k, v, sinks)

    (g_k, out_k), (g_r, out_r) = grads("kernel"), grads("reference")
    np.testing.assert_allclose(out_k, out_r, **kc.F32_TOL)
    for name, a, b in zip(("dq", "dk", "dv", "dsinks"), g_k, g_r):
        np.testing.assert_allclose(a, b, err_msg=name, **kc.F32_TOL)
    assert float(jnp.abs(g_r[3]).min()) > 0
