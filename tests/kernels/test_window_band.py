"""The window's band in the kernels (posjax/kernels/band.py): each program walks only the
blocks of the other sequence that its window can reach, so a local layer costs O(L x window)
in the kernels too. Checked here: the block ranges against a brute force over array indices
(both passes, the same pairs as the chunked path's band), that blocks outside the band are
never read (NaN there leaves the rows that cannot see them finite and unchanged, with every
tile computed: skip_empty_tiles=False), in both layouts, and that positions the band would
miss fall back to every block with the reference's numbers. The band with packed segments and
log-n is in test_window_sinks.py."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax.attention import attend
from posjax.kernels import band, flash_attention, vjp
from posjax.tiling import banded


@pytest.mark.parametrize("window,causal,bq,bk", [(10, False, 16, 16), (9, True, 16, 32),
                                                 (64, False, 32, 16), (3, True, 16, 16)])
def test_block_ranges_are_the_band(window, causal, bq, bk):
    nq, nk = 7, 11 * bq // bk  # the query side shorter than the key side
    back, forward = banded.reach(window, causal)

    def reaches(i, j):  # some query row of block i and key row of block j are near enough
        return any(-back <= kr - qr <= forward for qr in range(i * bq, (i + 1) * bq)
                   for kr in range(j * bk, (j + 1) * bk))

    pairs = {(i, j) for i, j in itertools.product(range(nq), range(nk)) if reaches(i, j)}
    fwd = band.sides(window, causal, True, bq, bk)
    bwd = band.sides(window, causal, False, bq, bk)
    from_q = {(i, j) for i in range(nq) for j in range(*band.block_range(i, fwd[0], fwd[1], nk,
                                                                          *fwd[2:]))}
    from_k = {(i, j) for j in range(nk) for i in range(*band.block_range(j, bwd[0], bwd[1], nq,
                                                                          *bwd[2:]))}
    assert from_q == pairs and from_k == pairs
    idx = band.key_blocks(window, causal, bq, bk, nq, nk)  # what band.exact checks
    assert {(i, j) for i in range(nq) for j in idx[i] if j >= 0} == pairs
    rect = banded.band(window, causal, bq, bk, nq, nk)  # the chunked path's: a superset
    assert rect is None or pairs <= {(i, j) for i in range(nq) for j in rect[i]}
    widths = [band.width(nq, *fwd[:2], nk, *fwd[2:]), band.width(nk, *bwd[:2], nq, *bwd[2:])]
    assert widths == [max(np.bincount([i for i, _ in pairs], minlength=nq)),
                      max(np.bincount([j for _, j in pairs], minlength=nk))]
    # Traced block indices (program ids, index maps) give the same ranges.
    traced = jax.jit(lambda i: band.block_range(i, fwd[0], fwd[1], nk, *fwd[2:]))
    assert [tuple(map(int, traced(i))) for i in range(nq)] == [
        band.block_range(i, fwd[0], fwd[1], nk, *fwd[2:]) for i in range(nq)]


def _poisoned(kc, layout, length, block, window, valid, seed, **kw):
    """Values and gradients of the kernel (every tile computed inside the band: no empty-tile
    skip) on clean inputs and on inputs whose last key/query block is NaN, and the reference's
    on clean ones. Rows of the first block cannot see the last one through the window."""
    scheme, params = kc.scheme({"name": "alibi"})
    q, k, v, cot = kc.inputs(1, length, length, jnp.float32, seed=seed)
    kw.update(scheme=scheme, params=params, window=window, kv_mask=kc.mask(1, length, [valid]))

    def run(impl):
        def loss(q, k, v):
            if impl == "kernel":
                out = flash_attention(q, k, v, block_q=block, block_k=block, layout=layout,
                                      skip_empty_tiles=False, **kw)
            else:
                out = attend(q, k, v, implementation="reference", **kw)
            return jnp.sum(out * cot), out
        return jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))

    kernel = run("kernel")
    last = slice((length - 1) // block * block, length)
    nan = [x.at[:, last].set(jnp.nan) for x in (q, k, v)]
    return kernel(q, k, v), kernel(*nan), run("reference")(q, k, v)


def _check(kc, clean, poisoned, ref, rows):
    (g_k, out_k), (g_p, out_p), (g_r, out_r) = clean, poisoned, ref
    np.testing.assert_allclose(out_k, out_r, **kc.F32_TOL)
    for name, a, b in zip(("dq", "dk", "dv"), g_k, g_r):
        np.testing.assert_allclose(a, b, err_msg=name, **kc.F32_TOL)
    # Walking a NaN block at all (even fully masked) would make these rows NaN: p = 0 times
    # v = NaN in p @ v, and ds = p (dp - delta) with delta NaN.
    for name, a, b in zip(("out", "dq", "dk", "dv"), (out_p,) + g_p, (out_k,) + g_k):
        assert bool(jnp.all(jnp.isfinite(a[:, rows]))), name
        np.testing.assert_allclose(a[:, rows], b[:, rows], err_msg=name, **kc.F32_TOL)


@pytest.mark.slow
def test_flat_band_skips_out_of_band_blocks(kc):
    # 4 blocks of 16, |i - j| <= 5: block 0 reaches key blocks 0-1 only (positions default:
    # the band needs no check).
    clean, poisoned, ref = _poisoned(kc, "flat", 64, 16, 10, 62, seed=51)
    _check(kc, clean, poisoned, ref, slice(0, 16))


@pytest.mark.slow
def test_tpu_band_streams_only_the_band(kc):
    # 'tpu' layout: 4 blocks of 128 (450 tokens, padded tail), causal window 0 <= i - j < 64,
    # with sinks: the inner grid axis has 2 steps (the widest band), query block 0 never
    # fetches key block 3, nor key block 0 query block 3.
    sinks = jnp.asarray([0.5, -1.0], jnp.float32)
    clean, poisoned, ref = _poisoned(kc, "tpu", 450, 128, 64, 447, seed=52, causal=True,
                                     sinks=sinks)
    _check(kc, clean, poisoned, ref, slice(0, 128))


@pytest.mark.slow
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "repeated"])
def test_checked_band_and_fallback(packed, kc, monkeypatch):
    # Given positions, the kernels check the band on the data (band.exact). Packed rows with
    # positions restarting per segment pass: the band. Positions that repeat (i // 3) put keys
    # up to 3 x 5 indices from a query inside its window, beyond the band: every key block.
    # The packed case also runs the dq pass in chunks of 2 query blocks (as beyond
    # DQ_CHUNK_BLOCKS with learnable params), whose band starts at the chunk's offset.
    if packed:
        monkeypatch.setattr(vjp, "DQ_CHUNK_BLOCKS", 2)
    scheme, params = kc.scheme({"name": "kerple", "variant": "log"})
    q, k, v, cot = kc.inputs(1, 64, 64, jnp.float32, seed=53)
    if packed:
        pos = jnp.concatenate([jnp.arange(30), jnp.arange(34)])[None].astype(jnp.int32)
        seg = (jnp.asarray([[0] * 30 + [1] * 34], jnp.int32),) * 2
    else:
        pos, seg = (jnp.arange(64, dtype=jnp.int32) // 3)[None], None
    assert bool(band.exact(pos, pos, None, seg, False, 10, 16, 16)) == packed
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=True, window=10,
               q_pos=pos, k_pos=pos, segment_ids=seg, kv_mask=kc.mask(1, 64, [60]))
