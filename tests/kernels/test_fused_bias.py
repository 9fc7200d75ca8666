"""The bias terms inside the kernel (posjax/kernels/terms/): ALiBi, KERPLE (log, power; r1/r2
gradients through the straight-through clamp), T5 (both directions; table gradients)
(helpers: conftest.py)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from posjax.kernels import vjp


def test_alibi_cross_attention_empty_rows(kc):
    # Lq != Lk, segments where query segment 3 has no key at all: its output is exactly 0 and
    # nothing is NaN (forward or backward).
    scheme, params = kc.scheme({"name": "alibi"})
    q, k, v, cot = kc.inputs(1, 20, 40, jnp.float32, seed=4)
    q_seg = jnp.asarray([[1] * 8 + [2] * 8 + [3] * 4], jnp.int32)
    k_seg = jnp.asarray([[1] * 20 + [2] * 20], jnp.int32)
    q_pos = jnp.arange(0, 40, 2, dtype=jnp.int32)[None]
    out = kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, q_pos=q_pos,
                     segment_ids=(q_seg, k_seg))
    assert float(jnp.abs(out[:, 16:]).max()) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["log", "power"])
def test_kerple_logn(variant, kc):
    scheme, params = kc.scheme({"name": "kerple", "variant": variant})
    # One r below eps: the straight-through clamp must still pass the gradient.
    params = {"r1": params["r1"].at[0].set(0.001), "r2": params["r2"]}
    q, k, v, cot = kc.inputs(2, 24, 24, jnp.float32, seed=5)
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=True,
               causal=variant == "power",
               kv_mask=kc.mask(2, 24, [20, 24]), logn_length=16)


@pytest.mark.slow
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5(bidirectional, kc, monkeypatch):
    # Positions spread 7 apart so the tile covers the log buckets up to max_distance and past.
    # The bidirectional case runs dq one query block per launch (vjp.DQ_CHUNK_BLOCKS).
    if bidirectional:
        monkeypatch.setattr(vjp, "DQ_CHUNK_BLOCKS", 1)
    scheme, params = kc.scheme({"name": "t5", "bidirectional": bidirectional})
    q, k, v, cot = kc.inputs(1, 24, 24, jnp.float32, seed=6)
    pos = (7 * jnp.arange(24, dtype=jnp.int32))[None]
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=True, q_pos=pos, k_pos=pos,
               causal=not bidirectional, kv_mask=kc.mask(1, 24, [21]))
