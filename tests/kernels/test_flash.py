"""flash.py end to end: RoPE (both pairings, partial, scalings) and xPos, values and
gradients in float32 and bf16 (helpers: conftest.py)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from posjax.attention import attend
from posjax.kernels import flash_attention


@pytest.mark.slow
@pytest.mark.parametrize("interleaved", [True, False])
def test_rope_causal_padding(interleaved, kc):
    # Interleaved (RoFormer) and half-split (GPT-NeoX), half-split with partial rotation; the
    # half-split case also computes every tile (skip_empty_tiles=False): same numbers.
    config = {"name": "rope", "interleaved": interleaved}
    if not interleaved:
        config["rotary_dim"] = 8
    scheme, params = kc.scheme(config)
    q, k, v, cot = kc.inputs(2, 24, 24, jnp.float32)
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, causal=True,
               kv_mask=kc.mask(2, 24, [24, 19]),
               kernel_kwargs=None if interleaved else {"skip_empty_tiles": False})


@pytest.mark.slow
def test_rope_scalings_segments(kc):
    # dynamic NTK: per-row frequencies from the key positions (the rows' largest positions
    # differ), packed segments with positions restarting at 0. YaRN only changes frequencies
    # and the logit scale: a forward check (test_rope_yarn_forward) saves a backward compile.
    scheme, params = kc.scheme({"name": "rope", "scaling": "dynamic_ntk", "factor": 2.0,
                               "original_length": 8, "interleaved": False})
    q, k, v, cot = kc.inputs(2, 20, 20, jnp.float32, seed=2)
    seg = jnp.asarray([[1] * 12 + [2] * 8, [1] * 20], jnp.int32)
    pos = jnp.asarray([list(range(12)) + list(range(8)), list(range(20))], jnp.int32)
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, q_pos=pos, k_pos=pos,
               segment_ids=(seg, seg))


@pytest.mark.slow
def test_rope_yarn_forward(kc):
    scheme, params = kc.scheme({"name": "rope", "scaling": "yarn", "factor": 4.0,
                               "original_length": 16})
    q, k, v, _ = kc.inputs(1, 20, 20, jnp.float32, seed=3)
    out = flash_attention(q, k, v, scheme=scheme, params=params, block_q=16, block_k=16)
    ref = attend(q, k, v, scheme=scheme, params=params, implementation="reference")
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), **kc.F32_TOL)


@pytest.mark.slow
def test_bfloat16_rope(kc):
    scheme, params = kc.scheme({"name": "rope"})
    q, k, v, cot = kc.inputs(1, 24, 24, jnp.bfloat16, seed=9)
    kc.compare(scheme, params, q, k, v, cot, kc.BF16_TOL, causal=True)


def test_xpos_causal(kc):
    # xPos is causal-only; a small scale_base makes the per-pair decay zeta**((i-j)/32) large
    # enough to matter at these lengths (q scaled up, k down by their own positions).
    scheme, params = kc.scheme({"name": "xpos", "scale_base": 32.0})
    q, k, v, cot = kc.inputs(1, 24, 24, jnp.float32, seed=11)
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, causal=True)

