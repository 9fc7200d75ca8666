"""Sliding-window (local layer) attention: the reference mask against a direct numpy
definition, chunked against the reference (values and gradients, with a position scheme,
padding and both directions), the chunked tile skip, and bad windows."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import positions
from posjax.attention import attend
from posjax.errors import ConfigError
from posjax.positions.base import Dims, Scheme

B, L, H, D = 2, 20, 2, 8
F32 = dict(rtol=2e-5, atol=2e-5)


def _qkv(length=L, seed=0):
    keys = jax.random.split(jax.random.key(seed), 4)
    return [jax.random.normal(kk, (B, length, H, D), jnp.float32) for kk in keys]


def _numpy_window_attention(q, k, v, window, causal, kv_mask):
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D)
    i, j = np.arange(q.shape[1])[:, None], np.arange(k.shape[1])[None]
    allowed = (0 <= i - j) & (i - j < window) if causal else np.abs(i - j) <= window // 2
    allowed = allowed[None, None] & np.asarray(kv_mask)[:, None, None, :]
    logits = np.where(allowed, logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", p, v)


@pytest.mark.parametrize("causal,window", [(False, 6), (True, 5)])
def test_reference_matches_direct_definition(causal, window):
    q, k, v, _ = _qkv()
    kv_mask = jnp.arange(L)[None] < jnp.array([[L], [L - 3]])
    out = attend(q, k, v, kv_mask=kv_mask, causal=causal, window=window,
                 implementation="reference")
    np.testing.assert_allclose(out, _numpy_window_attention(q, k, v, window, causal, kv_mask),
                               **F32)


@pytest.mark.parametrize("causal,window", [(False, 7), (True, 6)])
def test_chunked_equals_reference_values_and_grads(causal, window):
    dims = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64, causal=causal)
    scheme = positions.make("rope", base=500.0).bind(dims)
    q, k, v, cot = _qkv(seed=1)
    kv_mask = jnp.arange(L)[None] < jnp.array([[L - 2], [L]])

    def loss(impl, q, k, v):
        out = attend(q, k, v, scheme=scheme, params={}, kv_mask=kv_mask, causal=causal,
                     window=window, implementation=impl, block_q=4, block_k=4)
        return (out * cot).sum(), out

    # jitted, as in training: one compile each instead of one per primitive run eagerly
    (_, ref), gref = jax.jit(jax.value_and_grad(lambda *a: loss("reference", *a), (0, 1, 2),
                                                has_aux=True))(q, k, v)
    (_, got), ggot = jax.jit(jax.value_and_grad(lambda *a: loss("chunked", *a), (0, 1, 2),
                                                has_aux=True))(q, k, v)
    np.testing.assert_allclose(got, ref, **F32)
    for a, b in zip(ggot, gref):
        np.testing.assert_allclose(a, b, **F32)
    # the window changes the answer (else this test would prove nothing)
    full = attend(q, k, v, scheme=scheme, params={}, kv_mask=kv_mask, causal=causal,
                  implementation="reference")
    assert not np.allclose(full, ref, atol=1e-3)


@dataclasses.dataclass(frozen=True)
class TileCounter(Scheme):
    """A zero bias that records every tile whose computation runs."""

    name: ClassVar[str] = "test_window_tile_counter"

    def bias(self, params, q_pos, k_pos):
        jax.debug.callback(lambda: TILES.append(1), ordered=False)
        return jnp.zeros((q_pos.shape[0], 1, q_pos.shape[1], k_pos.shape[1]), jnp.float32)


TILES: list = []


@pytest.mark.slow
def test_chunked_skips_tiles_outside_the_window():
    # 64 tokens, blocks of 16 (4 x 4 tiles); window 16 reaches 8 tokens each way, so only the
    # diagonal tiles and their neighbours (4 + 3 + 3 = 10) hold an attendable pair.
    q, k, v, _ = _qkv(64, seed=2)
    dims = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)
    TILES.clear()
    out = attend(q, k, v, scheme=TileCounter().bind(dims), params={}, window=16,
                 implementation="chunked", block_q=16, block_k=16)
    jax.effects_barrier()
    assert len(TILES) == 10
    ref = attend(q, k, v, window=16, implementation="reference")
    np.testing.assert_allclose(out, ref, **F32)


@pytest.mark.parametrize("window", [0, -4, 2.5, True, "64"])
def test_bad_window(window):
    q, k, v, _ = _qkv(4)
    with pytest.raises(ConfigError) as e:
        attend(q, k, v, window=window)
    assert e.value.field == "window"
