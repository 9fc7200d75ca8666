"""The rows path (posjax/attention/rows.py): values and gradients equal the reference's for
every kind of hook (rotate, bias, content logits and values, scores, CoPE's counts, FoX's
per-token arrays, RoPE on values), masks, log-n, sinks, and a local layer's band (taken for
ordered positions, refused for shuffled ones); memory linear in the length; 'auto' picks it on
CPU for long bidirectional inputs.

Compile budget: one jitted output-and-gradients function per implementation and case, tiny
shapes (B=2, H=2, D=8, L <= 48), blocks of 8 or 16.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import positions
from posjax.attention import AUTO_CHUNKED_MIN_KEYS, attend, choose_implementation, rows
from posjax.positions.base import Dims
from tests.attention.test_attend import LOCAL, _all_avals, _assert_same, _lengths_mask, _params, _qkv

B, H, D = 2, 2, 8


def _same_as_reference(scheme, params, q, k, v, ct, **kw):
    return _assert_same(scheme, params, q, k, v, ct, implementation="rows", **kw)


@pytest.mark.parametrize("scheme_name", ["all_hooks", "scores"])
def test_hooks_segments_logn_and_a_fully_masked_row(scheme_name):
    # Two packed examples + padding; query 36 of row 0 has a segment no key has. L=37 with
    # block_q 16: three query blocks, the last one padded.
    scheme = LOCAL[scheme_name]
    seg = np.array([1] * 20 + [2] * 12 + [0] * 5)
    q_seg = seg.copy()
    q_seg[36] = 9
    segment_ids = (jnp.asarray(np.stack([q_seg, seg]), jnp.int32),
                   jnp.asarray(np.stack([seg, seg]), jnp.int32))
    out, grads = _same_as_reference(scheme, _params(scheme), *_qkv(37, 37),
                                    segment_ids=segment_ids, logn_length=16)
    np.testing.assert_array_equal(np.asarray(out[0, 36]), 0.0)
    np.testing.assert_array_equal(np.asarray(grads[0][0, 36]), 0.0)


@pytest.mark.parametrize("name,options,causal", [
    ("cope", {}, True), ("fox", {}, True), ("rope", {"on_values": True}, False)])
def test_counts_per_token_arrays_and_value_rotation(name, options, causal):
    dims = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64, vocab_size=32,
                causal=causal)
    scheme = positions.make(name, **options).bind(dims)
    _same_as_reference(scheme, _params(scheme), *_qkv(37, 37, seed=3), causal=causal,
                       kv_mask=_lengths_mask(37, [37, 29]))


def test_cross_lengths_and_sinks():
    # Lq != Lk, queries offset in position, key padding, learned sinks.
    q_pos = jnp.broadcast_to(jnp.arange(16, 37, dtype=jnp.int32), (B, 21))
    kv_mask = jnp.asarray(np.stack([np.ones(37, bool), np.arange(37) > 20]))
    _same_as_reference(None, {}, *_qkv(21, 37), q_pos=q_pos, kv_mask=kv_mask,
                       sinks=jnp.asarray([0.5, -1.0]), block_q=8)


@pytest.mark.parametrize("shuffle", [False, True])
def test_local_layer_band_ordered_or_shuffled(shuffle):
    # Row 0: two packed examples and padding; window 9 with blocks of 8 is a real band.
    # Shuffled positions make the band miss pairs: rows must then take whole rows.
    seg = np.asarray([[1] * 20 + [2] * 22 + [0] * 6, [1] * 48])
    pos = np.stack([np.concatenate([np.arange(20), np.arange(22), np.zeros(6, int)]),
                    np.arange(48)])
    if shuffle:
        pos = np.random.default_rng(0).permuted(pos, axis=1)
    pos, seg = jnp.asarray(pos, jnp.int32), jnp.asarray(seg, jnp.int32)
    dims = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)
    scheme = positions.make("rope", base=500.0).bind(dims)
    out, _ = _same_as_reference(scheme, {}, *_qkv(48, 48, seed=4), q_pos=pos, k_pos=pos,
                                kv_mask=seg > 0, segment_ids=(seg, seg), window=9,
                                block_q=8, block_k=8)
    full = attend(*_qkv(48, 48, seed=4)[:3], scheme=scheme, params={}, q_pos=pos, k_pos=pos,
                  kv_mask=seg > 0, segment_ids=(seg, seg), implementation="reference")
    assert not np.allclose(out, full, atol=1e-3)  # the window matters


def test_memory_is_linear_in_the_length():
    # Forward and backward at L=256, block_q 16: no intermediate as large as the [B, H, L, L]
    # logits; the largest is one block's [B, H, 16, L].
    length = 256
    q, k, v, _ = _qkv(length, length)

    def loss(q, k, v):
        return attend(q, k, v, kv_mask=_lengths_mask(length, [length, 200]),
                      implementation="rows", block_q=16).sum()

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    largest = max(int(np.prod(a.shape)) for a in _all_avals(jaxpr.jaxpr) if hasattr(a, "shape"))
    assert largest < B * H * length * length // 4


def test_auto_picks_rows_on_cpu_for_long_bidirectional_inputs(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    long = AUTO_CHUNKED_MIN_KEYS + 1
    assert choose_implementation("auto", None, long) == "rows"
    assert choose_implementation("auto", None, long, causal=True) == "chunked"
    assert choose_implementation("auto", None, AUTO_CHUNKED_MIN_KEYS) == "reference"
    assert choose_implementation("rows", None, 16) == "rows"
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert choose_implementation("auto", LOCAL["scores"], long) in ("kernel", "chunked")


def test_query_block_fills_the_budget_on_long_global_rows_and_shrinks_on_longer():
    # 6 heads, a global layer: as many query rows as fit BLOCK_ELEMENTS (24 MiB of logits),
    # evened out over the blocks; halved per doubling past 8192 keys, never below MIN_BLOCK_Q;
    # never longer than the queries.
    def fill(length, batch=1, heads=6):
        return rows.query_block(128, batch, heads, length, length, fill=True)

    assert [fill(n) for n in (2048, 4096, 8192, 16384)] == [512, 256, 128, 64]
    assert fill(1536, heads=12) == 256
    assert fill(2048, batch=4) == 128
    assert fill(2100) == 240  # 256 would take 9 blocks of which the last is mostly padding
    assert fill(10**7) == rows.MIN_BLOCK_Q
    assert fill(rows.FILL_FROM_KEYS - 1) == 128  # short rows keep block_q
    # A local layer (no fill) keeps block_q, halved only past the budget.
    assert rows.query_block(128, 1, 6, 2048, 2048) == 128
    assert rows.query_block(128, 1, 6, 16384, 16384) == 64
    assert rows.query_block(128, 2, 6, 16384, 16384) == 32
    assert rows.query_block(128, 1, 6, 37, 37) == 37


def test_filled_and_evened_blocks_stay_exact(monkeypatch):
    # The filled block at tiny scale: a budget of 32 query rows of 37 keys, evened out to two
    # blocks of 24 (11 padded rows), against the reference with masks and log-n.
    monkeypatch.setattr(rows, "FILL_FROM_KEYS", 32)
    monkeypatch.setattr(rows, "BLOCK_ELEMENTS", B * H * 32 * 37)
    assert rows.query_block(8, B, H, 37, 37, fill=True) == 24
    _same_as_reference(LOCAL["all_hooks"], _params(LOCAL["all_hooks"]), *_qkv(37, 37, seed=5),
                       kv_mask=_lengths_mask(37, [37, 30]), logn_length=16, block_q=8)
