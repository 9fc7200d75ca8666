"""The 'tpu' block layout (layout.py: per-query ids and row statistics lane-broadcast, per-key
ids sublane-broadcast, per-head scalars in SMEM, tables folded into (8, D) tiles, the other
sequence streamed on an inner grid axis with carries in scratch, RoPE / xPos rotated in XLA
before the kernel) run in Pallas interpret mode on CPU, against the reference: values and
gradients (q, k, v and learnable params), with padding, segments and causal masks.
These are the same kernel bodies and wrapper code that libtpu compiles for TPU in
test_lowering_tpu.py. Blocks are 128 (the layout's minimum) and lengths not multiples of it,
so every case has two or three key blocks and a padded tail (helpers: conftest.py), and
two query blocks, which exercises the parameter gradients' accumulation over query blocks
(one resident output block per batch and head in this layout).
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest


TPU = {"layout": "tpu"}


@pytest.mark.slow
def test_alibi_segments_causal_empty_rows(kc):
    # Cross attention Lq != Lk, packed segments (query segment 3 has no key: output exactly 0,
    # nothing NaN), causal by position, padded keys. ALiBi slopes come from SMEM.
    scheme, params = kc.scheme({"name": "alibi"})
    q, k, v, cot = kc.inputs(1, 140, 260, jnp.float32, seed=21)
    q_seg = jnp.asarray([[1] * 60 + [2] * 60 + [3] * 20], jnp.int32)
    k_seg = jnp.asarray([[1] * 130 + [2] * 130], jnp.int32)
    q_pos = jnp.arange(0, 280, 2, dtype=jnp.int32)[None]
    out = kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, kernel_kwargs=TPU,
                     q_pos=q_pos, segment_ids=(q_seg, k_seg), causal=True,
                     kv_mask=kc.mask(1, 260, [250]))
    assert float(jnp.abs(out[:, 120:]).max()) == 0.0


@pytest.mark.slow
def test_t5_table_grads(kc):
    # Bucket loop with per-head scalars read from SMEM at dynamic indices; table gradients.
    scheme, params = kc.scheme({"name": "t5", "bidirectional": True})
    q, k, v, cot = kc.inputs(2, 150, 150, jnp.float32, seed=22)
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=True, kernel_kwargs=TPU,
               kv_mask=kc.mask(2, 150, [150, 137]))


@pytest.mark.slow
def test_kerple_power_logn(kc):
    scheme, params = kc.scheme({"name": "kerple", "variant": "power"})
    q, k, v, cot = kc.inputs(1, 150, 150, jnp.float32, seed=23)
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=True, kernel_kwargs=TPU,
               causal=True, logn_length=64)


@pytest.mark.slow
def test_shaw_causal_padding(kc):
    # Tables [Rp/8, 8, D]: row r is sublane r % 8 of tile r // 8; key and value table grads.
    scheme, params = kc.scheme({"name": "shaw", "max_relative_position": 4})
    q, k, v, cot = kc.inputs(2, 150, 150, jnp.float32, seed=24)
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=True, kernel_kwargs=TPU,
               causal=True, kv_mask=kc.mask(2, 150, [150, 140]))


@pytest.mark.slow
def test_deberta_c2p_p2c(kc):
    # Per-head tables [H, Rp/8, 8, D]; exact, log and clipped buckets (positions 3 apart).
    scheme, params = kc.scheme({"name": "deberta", "bucket_size": 8, "max_position": 32})
    q, k, v, cot = kc.inputs(1, 150, 150, jnp.float32, seed=25)
    pos = (3 * jnp.arange(150, dtype=jnp.int32))[None]
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=True, kernel_kwargs=TPU,
               q_pos=pos, k_pos=pos, kv_mask=kc.mask(1, 150, [141]))


@pytest.mark.slow
def test_rope_bfloat16_causal(kc):
    # RoPE is rotated by the scheme's rotate hook before the kernel in this layout.
    scheme, params = kc.scheme({"name": "rope"})
    q, k, v, cot = kc.inputs(1, 150, 150, jnp.bfloat16, seed=26)
    kc.compare(scheme, params, q, k, v, cot, kc.BF16_TOL, kernel_kwargs=TPU, causal=True,
               kv_mask=kc.mask(1, 150, [145]))


def test_nezha_small_table(kc):
    # K=1: 3 rows (4 after the power-of-two pad) padded to one (8, D) tile; offset positions.
    scheme, params = kc.scheme({"name": "nezha", "max_relative_position": 1})
    q, k, v, cot = kc.inputs(1, 150, 150, jnp.float32, seed=27)
    pos = (jnp.arange(150, dtype=jnp.int32) + 100)[None]
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, kernel_kwargs=TPU, q_pos=pos,
               k_pos=pos, kv_mask=kc.mask(1, 150, [148]))
