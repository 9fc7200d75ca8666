"""Tests for posjax/positions/deberta.py: deberta_bucket and DeBERTa-v2 disentangled attention."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from posjax import positions
from posjax.errors import ConfigError
from posjax.positions import make
from posjax.positions.base import Dims
from posjax.positions.deberta import Deberta, deberta_bucket

B, H, D = 2, 2, 4
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)


# -- numpy mirrors of HF transformers models/deberta_v2/modeling_deberta_v2.py ----------------
def _hf_make_log_bucket_position(relative_pos, bucket_size, max_position):
    sign = np.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = np.where((relative_pos < mid) & (relative_pos > -mid), mid - 1,
                       np.abs(relative_pos)).astype(np.float32)
    log_pos = np.ceil(np.log(abs_pos / np.float32(mid))
                      / np.log(np.float32((max_position - 1) / mid)) * np.float32(mid - 1)) + mid
    return np.where(abs_pos <= mid, relative_pos, log_pos * sign).astype(np.int64)


def _hf_build_relative_position(query_size, key_size, bucket_size, max_position):
    q_ids = np.arange(query_size)
    k_ids = np.arange(key_size)
    rel = q_ids[:, None] - k_ids[None, :]
    if bucket_size > 0 and max_position > 0:
        rel = _hf_make_log_bucket_position(rel, bucket_size, max_position)
    return rel[None]  # [1, q, k]


def _hf_disentangled_bias(q, k, pos_key, pos_query, span, bucket_size, max_position, c2p, p2c):
    """HF DisentangledSelfAttention.disentangled_attention_bias with [B*H, L, D] layouts."""
    b, length, h, d = q.shape
    query_layer = np.asarray(q, np.float64).transpose(0, 2, 1, 3).reshape(b * h, length, d)
    key_layer = np.asarray(k, np.float64).transpose(0, 2, 1, 3).reshape(b * h, length, d)
    relative_pos = _hf_build_relative_position(length, length, bucket_size, max_position)
    scale_factor = 1 + int(c2p) + int(p2c)
    score = 0.0
    if c2p:
        pos_key_layer = np.tile(np.asarray(pos_key, np.float64).transpose(1, 0, 2), (b, 1, 1))
        c2p_att = query_layer @ pos_key_layer.transpose(0, 2, 1)  # [BH, L, 2span]
        c2p_pos = np.clip(relative_pos + span, 0, span * 2 - 1)
        c2p_att = np.take_along_axis(c2p_att, np.broadcast_to(c2p_pos, (b * h, length, length)),
                                     axis=-1)
        score = score + c2p_att / math.sqrt(d * scale_factor)
    if p2c:
        pos_query_layer = np.tile(np.asarray(pos_query, np.float64).transpose(1, 0, 2), (b, 1, 1))
        r_pos = relative_pos
        p2c_pos = np.clip(-r_pos + span, 0, span * 2 - 1)
        p2c_att = key_layer @ pos_query_layer.transpose(0, 2, 1)
        p2c_att = np.take_along_axis(p2c_att, np.broadcast_to(p2c_pos, (b * h, length, length)),
                                     axis=-1).transpose(0, 2, 1)
        score = score + p2c_att / math.sqrt(d * scale_factor)
    return np.asarray(score).reshape(b, h, length, length)


# -- deberta_bucket -----------------------------------------------------------------------------
def test_bucket_golden_vectors():
    # HF make_log_bucket_position(r, 256, 512) (query minus key); |r| <= 128 kept exactly,
    # e.g. 200 -> ceil(log(200/128)/log(511/128)*127) + 128 = 41 + 128 = 169.
    rel = jnp.array([0, 5, -128, 128, 129, 200, -200, 511, -511, 512, 1000])
    want = [0, 5, -128, 128, 129, 169, -169, 255, -255, 256, 317]
    np.testing.assert_array_equal(deberta_bucket(rel), want)
    assert positions.deberta_bucket is deberta_bucket


@pytest.mark.parametrize("bucket_size,max_position", [(256, 512), (64, 128), (8, 16)])
def test_bucket_matches_hf_formula_over_a_range(bucket_size, max_position):
    rel = np.arange(-3000, 3001)
    want = _hf_make_log_bucket_position(rel, bucket_size, max_position)
    got = deberta_bucket(jnp.asarray(rel), bucket_size=bucket_size, max_position=max_position)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[::-1], -got)  # odd: p2c's -bucket(k-q) == bucket(q-k)
    assert bool(jnp.all(jnp.diff(got) >= 0))  # monotone


def test_bucket_disabled_returns_raw_distance():
    rel = jnp.arange(-5, 6)
    np.testing.assert_array_equal(deberta_bucket(rel, bucket_size=0, max_position=3), rel)


# -- the scheme -----------------------------------------------------------------------------------
def _setup(scheme, length=20, seed=0, dtype=jnp.float32):
    scheme = scheme.bind(DIMS)
    params = scheme.init_layer(jax.random.key(seed))
    r = jax.random.split(jax.random.key(seed + 1), 2)
    q = jax.random.normal(r[0], (B, length, H, D), jnp.float32).astype(dtype)
    k = jax.random.normal(r[1], (B, length, H, D), jnp.float32).astype(dtype)
    pos = jnp.tile(jnp.arange(length, dtype=jnp.int32), (B, 1))
    return params, q, k, pos


@pytest.mark.parametrize("c2p,p2c", [(True, True), (True, False), (False, True)])
def test_equals_hf_disentangled_attention(c2p, p2c):
    # Small buckets so that 20 tokens exercise exact, log-bucketed and clipped distances.
    scheme = Deberta(c2p=c2p, p2c=p2c, bucket_size=8, max_position=16)
    scheme.check(DIMS, 20)
    params, q, k, pos = _setup(scheme)
    assert set(params) == {n for n, on in (("pos_key", c2p), ("pos_query", p2c)) if on}
    assert all(t.shape == (16, H, D) for t in params.values())
    got = scheme.content_logits(params, q, k, pos, pos) * scheme.logit_scale(D)
    want = _hf_disentangled_bias(q, k, params.get("pos_key"), params.get("pos_query"), 8, 8, 16,
                                 c2p, p2c)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_logit_scale_counts_the_terms():
    assert math.isclose(Deberta().logit_scale(64), 1 / math.sqrt(3 * 64))
    assert math.isclose(Deberta(p2c=False).logit_scale(64), 1 / math.sqrt(2 * 64))
    assert math.isclose(Deberta(c2p=False).logit_scale(64), 1 / math.sqrt(2 * 64))


def test_without_buckets_span_is_max_position():
    scheme = Deberta(bucket_size=0, max_position=6)
    params, q, k, pos = _setup(scheme, length=10)
    assert params["pos_key"].shape == (12, H, D)
    got = scheme.content_logits(params, q, k, pos, pos) * scheme.logit_scale(D)
    want = _hf_disentangled_bias(q, k, params["pos_key"], params["pos_query"], 6, 0, 6, True, True)
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.slow
def test_tiles_concatenated_equal_whole_with_offset_positions():
    scheme = Deberta(bucket_size=8, max_position=16)
    params, q, k, pos = _setup(scheme, length=12, seed=3)
    pos = pos * 2 + jnp.array([[0], [5]])  # not contiguous, per-row offsets
    whole = scheme.content_logits(params, q, k, pos, pos)
    rows = [jnp.concatenate([scheme.content_logits(params, q[:, i:i + 4], k[:, j:j + 6],
                                                   pos[:, i:i + 4], pos[:, j:j + 6])
                             for j in (0, 6)], axis=-1) for i in (0, 4, 8)]
    np.testing.assert_allclose(jnp.concatenate(rows, axis=2), whole, atol=1e-5)


def test_bfloat16_inputs():
    scheme = Deberta(bucket_size=8, max_position=16)
    params, q, k, pos = _setup(scheme, length=8, seed=4)
    ref = scheme.content_logits(params, q, k, pos, pos)
    got = scheme.content_logits(params, q.astype(jnp.bfloat16), k.astype(jnp.bfloat16), pos, pos)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, ref, atol=0.02 * float(jnp.max(jnp.abs(ref))))


def test_gradients_wrt_tables():
    scheme = Deberta(bucket_size=4, max_position=8)
    params, q, k, pos = _setup(scheme, length=6, seed=5)
    check_grads(lambda kr, qr: scheme.content_logits({"pos_key": kr, "pos_query": qr},
                                                     q, k, pos, pos),
                (params["pos_key"], params["pos_query"]), order=1, modes=("rev",),
                atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("fields,field", [
    ({"c2p": False, "p2c": False}, "c2p"),
    ({"c2p": 1}, "c2p"),
    ({"bucket_size": -1}, "bucket_size"),
    ({"bucket_size": 2}, "bucket_size"),
    ({"bucket_size": 256, "max_position": 129}, "max_position"),
    ({"max_position": 0}, "max_position"),
])
def test_bad_configs_raise(fields, field):
    with pytest.raises(ConfigError, match=f"position.{field}"):
        make({"name": "deberta", **fields}).check(DIMS, 16)
