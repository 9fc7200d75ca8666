"""The chunked path's band for local layers (posjax/tiling/banded.py): the exact count of
attendable keys against brute force for any positions, the band taken for ordered (also
packed) positions and refused for shuffled ones, and chunked == reference either way."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax.attention import attend
from posjax.tiling import banded
from posjax.tiling.tiles import tile_mask

B, L, H, D = 2, 48, 2, 8


def _packed():
    seg = np.asarray([[1] * 20 + [2] * 22 + [0] * 6, [1] * 48])  # row 0: 2 examples, padding
    pos = np.concatenate([np.arange(20), np.arange(22), np.zeros(6, int)])
    return (jnp.asarray(np.stack([pos, np.arange(48)]), jnp.int32), jnp.asarray(seg, jnp.int32),
            jnp.asarray(seg > 0))


@pytest.mark.parametrize("causal,window", [(False, 9), (True, 6)])
def test_attendable_keys_equals_brute_force(causal, window):
    rng = np.random.default_rng(0)
    pos = jnp.asarray(rng.integers(0, 30, (B, L)), jnp.int32)  # repeats, any order
    seg = jnp.asarray(rng.integers(0, 3, (B, L)), jnp.int32)
    real = jnp.asarray(rng.random((B, L)) < 0.8)
    got = banded.attendable_keys(pos, seg, pos, seg, real, window, causal)
    want = tile_mask(pos, pos, real, seg, seg, causal, window)[:, 0].sum(-1)
    np.testing.assert_array_equal(got, want)


def _chunked_band_taken(pos, seg, real, window, causal, block=8):
    """What chunked decides: does the band hold every attendable pair?"""
    nq = nk = L // block
    idx = banded.band(window, causal, block, block, nq, nk)
    assert idx is not None and idx.shape[1] < nk  # a real band, narrower than the row

    def blocks(*xs):
        return tuple(None if x is None else jnp.moveaxis(x.reshape(B, nq, block, *x.shape[2:]),
                                                         1, 0) for x in xs)

    zeros = jnp.zeros((B, L, 1, 1))
    q_blocks = blocks(zeros, pos, seg, None)
    band = banded.gather(blocks(zeros, zeros, pos, real, seg, None), idx)
    mask_of = lambda qp, qs, kp, km, ks: tile_mask(qp, kp, km, qs, ks, causal, window)  # noqa
    return bool(banded.covers_all_pairs(band, q_blocks, mask_of, L, pos, seg, pos, seg, real,
                                        window, causal))


@pytest.mark.parametrize("causal,window", [(False, 9), (True, 6)])
def test_band_taken_for_ordered_positions_refused_for_shuffled(causal, window):
    pos, seg, real = _packed()
    assert _chunked_band_taken(pos, seg, real, window, causal)
    shuffled = jnp.asarray(np.random.default_rng(1).permutation(L)[None].repeat(B, 0), jnp.int32)
    ones = jnp.ones((B, L), jnp.int32)
    assert not _chunked_band_taken(shuffled, ones, jnp.ones((B, L), bool), window, causal)


@pytest.mark.parametrize("shuffle", [False, True])
def test_chunked_equals_reference_packed_or_shuffled(shuffle):
    pos, seg, real = _packed()
    if shuffle:  # the band would miss pairs: chunked must walk every key block instead
        pos = jnp.asarray(np.random.default_rng(2).permutation(L)[None].repeat(B, 0), jnp.int32)
    keys = jax.random.split(jax.random.key(0), 4)
    q, k, v, cot = (jax.random.normal(kk, (B, L, H, D)) for kk in keys)

    def run(impl):
        def loss(q, k, v):
            out = attend(q, k, v, q_pos=pos, k_pos=pos, kv_mask=real, segment_ids=(seg, seg),
                         window=9, implementation=impl, block_q=8, block_k=8)
            return jnp.sum(out * cot), out
        return jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)

    (gc, c), (gr, r) = run("chunked"), run("reference")
    np.testing.assert_allclose(c, r, rtol=2e-5, atol=2e-5)
    for a, b in zip(gc, gr):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)
