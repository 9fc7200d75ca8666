"""FoX (forgetting attention) fused in the kernels: the per-token forget-gate sums c enter the
kernels as inputs blocked like q and k (posjax/kernels/terms/fox.py), and the backward pass
returns their gradient, so the gate parameters train through the kernel. Interpret mode on
CPU against the reference: values and gradients (q, k, v and the gate's w, b), in both block
layouts."""

from __future__ import annotations

import jax
import pytest
import jax.numpy as jnp

from posjax import positions
from posjax.positions.base import Dims


def _fox(kc, causal: bool):
    """FoX bound to the test dims; w scaled up so the gates differ per token and the decay is
    strong at these lengths (at init they are all ~sigmoid(b))."""
    dims = Dims(num_heads=kc.H, head_dim=kc.D, hidden=kc.H * kc.D, max_length=256, causal=causal)
    scheme = positions.make({"name": "fox", "gate_bias": 1.0}).bind(dims)
    params = scheme.init_layer(jax.random.PRNGKey(1))
    return scheme, {"w": 20.0 * params["w"], "b": params["b"]}


@pytest.mark.slow
def test_flat_bidirectional_segments_padding(kc):
    # Encoder (keys after the query see c_j - c_i), packed segments with positions restarting
    # at 0, padded keys; 40 tokens in blocks of 16 (padded tail).
    scheme, params = _fox(kc, causal=False)
    q, k, v, cot = kc.inputs(2, 40, 40, jnp.float32, seed=41)
    seg = jnp.asarray([[1] * 22 + [2] * 18, [1] * 40], jnp.int32)
    pos = jnp.asarray([list(range(22)) + list(range(18)), list(range(40))], jnp.int32)
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=True, q_pos=pos, k_pos=pos,
               segment_ids=(seg, seg), kv_mask=kc.mask(2, 40, [40, 33]))


def test_tpu_layout_causal_padding(kc):
    # 'tpu' layout (c as lane-broadcast columns and sublane-broadcast rows, the other
    # sequence streamed): two query and two key blocks of 128, causal, padded keys.
    scheme, params = _fox(kc, causal=True)
    q, k, v, cot = kc.inputs(1, 150, 150, jnp.float32, seed=42)
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=True, causal=True,
               kv_mask=kc.mask(1, 150, [141]), kernel_kwargs={"layout": "tpu"})
