"""The table terms inside the kernel (posjax/kernels/terms/tables.py, deberta.py): Shaw (key
and value table gradients), NEZHA (fixed table; far key blocks collapse to one bin) and
DeBERTa (c2p + p2c per-head tables, log buckets) (helpers: conftest.py)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from posjax.kernels import vjp


@pytest.mark.slow
def test_shaw_causal(kc, monkeypatch):
    # dq in chunks of 2 query blocks (3 blocks: chunks of 2 and 1), each chunk's table-gradient
    # partials summed before the next (vjp.DQ_CHUNK_BLOCKS, 32 outside the tests).
    monkeypatch.setattr(vjp, "DQ_CHUNK_BLOCKS", 2)
    scheme, params = kc.scheme({"name": "shaw", "max_relative_position": 4})
    q, k, v, cot = kc.inputs(2, 40, 40, jnp.float32, seed=7)
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=True, causal=True,
               kv_mask=kc.mask(2, 40, [40, 33]))


@pytest.mark.slow
def test_nezha_far_tiles(kc):
    # K=4 with blocks of 16: most key blocks lie entirely beyond +-K of the query block (one
    # bin), tiles on the diagonal need all 2K+1; offset positions (not arange).
    scheme, params = kc.scheme({"name": "nezha", "max_relative_position": 4})
    q, k, v, cot = kc.inputs(1, 40, 40, jnp.float32, seed=8)
    pos = (jnp.arange(40, dtype=jnp.int32) + 100)[None]
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, q_pos=pos, k_pos=pos)


@pytest.mark.slow
def test_bfloat16_shaw(kc):
    scheme, params = kc.scheme({"name": "shaw", "max_relative_position": 4})
    q, k, v, cot = kc.inputs(1, 24, 24, jnp.bfloat16, seed=9)
    kc.compare(scheme, params, q, k, v, cot, kc.BF16_TOL, learnable=True, causal=True)


@pytest.mark.slow
def test_deberta_log_buckets(kc, monkeypatch):
    # bucket_size 8 / max_position 32 with positions 3 apart: exact, log and clipped rows all
    # occur; c2p (query side) and p2c (key side, into dk) with both table gradients; dq in
    # chunks of one query block.
    monkeypatch.setattr(vjp, "DQ_CHUNK_BLOCKS", 1)
    scheme, params = kc.scheme({"name": "deberta", "bucket_size": 8, "max_position": 32})
    q, k, v, cot = kc.inputs(1, 40, 40, jnp.float32, seed=12)
    pos = (3 * jnp.arange(40, dtype=jnp.int32))[None]
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=True, q_pos=pos, k_pos=pos,
               kv_mask=kc.mask(1, 40, [35]))
