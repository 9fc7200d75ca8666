"""Tests for posjax/positions/t5.py: t5_bucket and the T5 bias scheme."""

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
from posjax.positions.t5 import T5, t5_bucket

ENCODER = Dims(num_heads=3, head_dim=4, hidden=12, max_length=64)
DECODER = Dims(num_heads=3, head_dim=4, hidden=12, max_length=64, causal=True)


def _flaxformer_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    # numpy copy of google/flaxformer components/relative_position_biases.py
    # RelativePositionBiases._relative_position_bucket (float32 log with + eps).
    ret = 0
    n = -relative_position
    if bidirectional:
        num_buckets //= 2
        ret += (n < 0).astype(np.int32) * num_buckets
        n = np.abs(n)
    else:
        n = np.maximum(n, 0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (
        np.log(n.astype(np.float32) / max_exact + np.finfo(np.float32).eps)
        / np.log(max_distance / max_exact) * (num_buckets - max_exact)).astype(np.int32)
    val_if_large = np.minimum(val_if_large, num_buckets - 1)
    return ret + np.where(is_small, n, val_if_large)


def test_golden_vectors_bidirectional():
    # The T5 bucket rule of flaxformer / t5x: relative = key - query.
    rel = jnp.array([-1, -12, -127, 1, 8, 128, 0, -7, -8, 7, -1000, 1000])
    want = [1, 9, 15, 17, 24, 31, 0, 7, 8, 23, 15, 31]
    np.testing.assert_array_equal(t5_bucket(rel), want)
    assert positions.t5_bucket is t5_bucket


def test_exact_power_distances_land_on_their_bucket():
    # log(n/8)/log(16)*8 is exactly 2, 4, 6 at n = 16, 32, 64; flaxformer's eps keeps the
    # float32 floor from dropping one bucket.
    np.testing.assert_array_equal(t5_bucket(jnp.array([-16, -32, -64])), [10, 12, 14])


def test_golden_vectors_causal():
    # Causal: all 32 buckets on the past side, max_exact 16; future keys share bucket 0.
    rel = jnp.array([0, -1, -15, -16, -20, -127, -128, -5000, 1, 50])
    # -20: 16 + int(log(20/16)/log(128/16)*16) = 16 + int(1.716) = 17.
    want = [0, 1, 15, 16, 17, 31, 31, 31, 0, 0]
    np.testing.assert_array_equal(t5_bucket(rel, bidirectional=False), want)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (64, 512), (8, 20)])
def test_matches_flaxformer_over_a_range(bidirectional, num_buckets, max_distance):
    rel = np.arange(-700, 701, dtype=np.int32)
    want = _flaxformer_bucket(rel, bidirectional, num_buckets, max_distance)
    got = t5_bucket(jnp.asarray(rel), bidirectional=bidirectional, num_buckets=num_buckets,
                    max_distance=max_distance)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(got, want)


def test_monotone_in_distance_and_offset_by_16():
    n = jnp.arange(0, 400)
    past = t5_bucket(-n)  # key before the query
    future = t5_bucket(n)
    assert bool(jnp.all(jnp.diff(past) >= 0)) and bool(jnp.all(jnp.diff(future) >= 0))
    # Bidirectional: the key-after-query side is the same buckets shifted by 16.
    np.testing.assert_array_equal(future[1:], past[1:] + 16)
    assert int(past.max()) == 15 and int(future.max()) == 31
    causal = t5_bucket(-n, bidirectional=False)
    assert bool(jnp.all(jnp.diff(causal) >= 0)) and int(causal.max()) == 31


# -- the scheme -------------------------------------------------------------------------------
def _positions(lq, lk, offset=0):
    q = jnp.stack([jnp.arange(lq) + offset, jnp.arange(lq) * 7])
    k = jnp.stack([jnp.arange(lk), jnp.arange(lk) * 5])
    return q.astype(jnp.int32), k.astype(jnp.int32)


@pytest.mark.parametrize("dims,bidirectional", [(ENCODER, True), (DECODER, False)])
def test_bias_is_table_at_bucket(dims, bidirectional):
    scheme = T5(bidirectional=bidirectional)
    scheme.check(dims, 64)
    scheme = scheme.bind(dims)
    params = scheme.init_layer(jax.random.key(0))
    assert params["table"].shape == (32, 3) and params["table"].dtype == jnp.float32
    q_pos, k_pos = _positions(5, 6, offset=3)
    bias = scheme.bias(params, q_pos, k_pos)
    assert bias.shape == (2, 3, 5, 6) and bias.dtype == jnp.float32
    rel = np.asarray(k_pos)[:, None, :] - np.asarray(q_pos)[:, :, None]
    bucket = _flaxformer_bucket(rel, bidirectional)
    want = np.asarray(params["table"])[bucket].transpose(0, 3, 1, 2)
    np.testing.assert_allclose(bias, want, atol=0)


def test_bias_tiles_concatenated_equal_whole():
    scheme = T5()
    scheme = scheme.bind(ENCODER)
    params = scheme.init_layer(jax.random.key(1))
    q_pos, k_pos = _positions(8, 8)
    whole = scheme.bias(params, q_pos, k_pos)
    rows = [jnp.concatenate([scheme.bias(params, q_pos[:, i:i + 4], k_pos[:, j:j + 4])
                             for j in (0, 4)], axis=-1) for i in (0, 4)]
    np.testing.assert_array_equal(jnp.concatenate(rows, axis=2), whole)


def test_bias_gradient_wrt_table():
    scheme = T5(num_buckets=8, max_distance=16)
    scheme = scheme.bind(ENCODER)
    params = scheme.init_layer(jax.random.key(2))
    q_pos, k_pos = _positions(4, 5)
    check_grads(lambda t: scheme.bias({"table": t}, q_pos, k_pos), (params["table"],),
                order=1, modes=("rev",))
    # The gradient of sum(bias) counts how often each bucket is used.
    g = jax.grad(lambda t: jnp.sum(scheme.bias({"table": t}, q_pos, k_pos)))(params["table"])
    rel = np.asarray(k_pos)[:, None, :] - np.asarray(q_pos)[:, :, None]
    counts = np.bincount(_flaxformer_bucket(rel, True, 8, 16).ravel(), minlength=8)
    np.testing.assert_allclose(g, np.repeat(counts[:, None], 3, axis=1))


def test_share_layers_is_a_field_defaulting_to_true():
    assert T5().share_layers is True
    assert make({"name": "t5", "share_layers": False}).share_layers is False


def test_init_scale_like_t5x():
    table = T5().bind(ENCODER).init_layer(jax.random.key(3))["table"]
    limit = math.sqrt(3.0 / ((32 + 3) / 2.0))
    assert float(jnp.max(jnp.abs(table))) <= limit


# -- config errors ----------------------------------------------------------------------------
def test_bidirectional_must_agree_with_causal():
    with pytest.raises(ConfigError, match="position.bidirectional.*causal"):
        T5(bidirectional=True).check(DECODER, 16)  # causal model with bidirectional buckets
    with pytest.raises(ConfigError, match="position.bidirectional"):
        T5(bidirectional=False).check(ENCODER, 16)
    T5(bidirectional=False).check(DECODER, 16)


def test_bidirectional_default_follows_the_bound_model():
    assert T5().bidirectional is None
    assert T5().bind(ENCODER).bidirectional is True
    assert T5().bind(DECODER).bidirectional is False
    assert T5(num_buckets=31, max_distance=64).bind(DECODER).bidirectional is False
    with pytest.raises(ConfigError, match="position.num_buckets"):
        T5(num_buckets=31).bind(ENCODER)  # odd: fine one-sided, not with two sides


@pytest.mark.parametrize("fields,field", [
    ({"num_buckets": 31}, "num_buckets"),
    ({"num_buckets": 2}, "num_buckets"),
    ({"num_buckets": 0}, "num_buckets"),
    ({"max_distance": 8}, "max_distance"),
    ({"max_distance": 4.5}, "max_distance"),
    ({"share_layers": "yes"}, "share_layers"),
])
def test_bad_configs_raise(fields, field):
    with pytest.raises(ConfigError, match=f"position.{field}"):
        make({"name": "t5", **fields}).check(ENCODER, 16)


def test_causal_allows_odd_bucket_count():
    T5(bidirectional=False, num_buckets=31, max_distance=64).check(DECODER, 16)
