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


def test_query_block_shrinks_on_long_rows():
    # 6 heads: 128 up to 8192 keys, halved per doubling beyond, never below MIN_BLOCK_Q;
    # never longer than the queries.
    assert rows.query_block(128, 1, 6, 8192, 8192) == 128
    assert rows.query_block(128, 1, 6, 16384, 16384) == 64
    assert rows.query_block(128, 2, 6, 16384, 16384) == 32
    assert rows.query_block(128, 1, 6, 10**7, 10**7) == rows.MIN_BLOCK_Q
    assert rows.query_block(128, 1, 6, 37, 37) == 37
