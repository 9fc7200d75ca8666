"""Tests for posjax/positions/tupe.py: TUPE untied positional bias with the [CLS] reset."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from posjax.errors import ConfigError
from posjax.positions import make
from posjax.positions.base import Dims
from posjax.positions.t5 import t5_bucket
from posjax.positions.tupe import Tupe

H, D = 2, 3
E = H * D
L = 7
DIMS = Dims(num_heads=H, head_dim=D, hidden=E, max_length=L)


def _layer_norm(x, scale, bias, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def _tupe_reference(t, seq_len, rel_pos_bins=None, max_rel_pos=None, rel_table=None):
    """numpy copy of guolinke/TUPE TransformerSentenceEncoder.forward's abs_pos_bias (+ rel)."""
    weight = _layer_norm(t["pos"][:seq_len + 1], t["ln_scale"], t["ln_bias"])
    proj = weight @ t["W"].T + t["b"]  # nn.Linear(E, 2E)
    pos_q, pos_k = proj.reshape(seq_len + 1, 2, H, -1).transpose(1, 2, 0, 3)
    pos_q = pos_q * float(E / H * 2) ** -0.5  # pos_scaling
    abs_pos_bias = pos_q @ pos_k.transpose(0, 2, 1)  # [H, L+1, L+1]
    cls_2_other = abs_pos_bias[:, 0, 0].copy()
    other_2_cls = abs_pos_bias[:, 1, 1].copy()
    abs_pos_bias = abs_pos_bias[:, 1:, 1:].copy()
    abs_pos_bias[:, :, 0] = other_2_cls[:, None]
    abs_pos_bias[:, 0, :] = cls_2_other[:, None]
    if rel_table is not None:
        rel = np.arange(seq_len)[None, :] - np.arange(seq_len)[:, None]  # memory - context
        rp_bucket = np.array(t5_bucket(jnp.asarray(rel), num_buckets=rel_pos_bins,
                                         max_distance=max_rel_pos))
        rp_bucket[:, 0] = rel_pos_bins
        rp_bucket[0, :] = rel_pos_bins // 2
        abs_pos_bias = abs_pos_bias + rel_table[rp_bucket].transpose(2, 0, 1)
    return abs_pos_bias


def _tupe_params(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "pos": rng.normal(size=(L + 1, E)),
        "ln_scale": 1 + 0.1 * rng.normal(size=E),
        "ln_bias": 0.1 * rng.normal(size=E),
        "W": rng.normal(size=(2 * E, E)) * 0.5,
        "b": rng.normal(size=2 * E) * 0.1,
    }


def _convert(t):
    """TUPE weights -> posjax Tupe params (the documented conversion)."""
    weight = _layer_norm(t["pos"][:2], t["ln_scale"], t["ln_bias"])
    proj = (weight @ t["W"].T + t["b"]).reshape(2, 2, H, D)  # [row, q/k, H, D]
    theta = np.einsum("rhd,rhd->rh", proj[:, 0], proj[:, 1]) / math.sqrt(2 * D)
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    return {
        "pos": f32(t["pos"][1:]),  # TUPE's token t reads row t+1
        "ln_scale": f32(t["ln_scale"]),
        "ln_bias": f32(t["ln_bias"]),
        "proj_q": f32(t["W"][:E].T.reshape(E, H, D)),
        "proj_k": f32(t["W"][E:].T.reshape(E, H, D)),
        "bias_q": f32(t["b"][:E].reshape(H, D)),
        "bias_k": f32(t["b"][E:].reshape(H, D)),
        "theta_cls_to_other": f32(theta[0]),
        "theta_other_to_cls": f32(theta[1]),
    }


def _pos(length, batch=1):
    return jnp.tile(jnp.arange(length, dtype=jnp.int32), (batch, 1))


def test_equals_tupe_reference_code():
    t = _tupe_params()
    scheme = Tupe()
    scheme.check(DIMS, L)
    got = scheme.bias(_convert(t), _pos(L), _pos(L))
    assert got.shape == (1, H, L, L) and got.dtype == jnp.float32
    np.testing.assert_allclose(got[0], _tupe_reference(t, L), atol=1e-4)


def test_equals_tupe_reference_with_relative_buckets():
    t = _tupe_params(1)
    rel_table = np.random.default_rng(2).normal(size=(8 + 1, H))
    scheme = Tupe(relative=True, num_buckets=8, max_distance=16)
    params = {**_convert(t), "rel_table": jnp.asarray(rel_table, jnp.float32)}
    got = scheme.bias(params, _pos(L), _pos(L))
    np.testing.assert_allclose(got[0], _tupe_reference(t, L, 8, 16, rel_table), atol=1e-4)


def test_cls_reset_rows_and_columns_per_packed_example():
    scheme = Tupe()
    scheme = scheme.bind(DIMS)
    params = scheme.init_layer(jax.random.key(0))
    params = {**params, "theta_cls_to_other": jnp.array([1.5, -2.0]),
              "theta_other_to_cls": jnp.array([0.25, 3.0])}
    pos = jnp.array([[0, 1, 2, 0, 1, 2, 3]], jnp.int32)  # two packed examples
    bias = np.asarray(scheme.bias(params, pos, pos))[0]
    for h, (c2o, o2c) in enumerate([(1.5, 0.25), (-2.0, 3.0)]):
        np.testing.assert_array_equal(bias[h][[0, 3]], c2o)  # [CLS] rows (incl. [CLS]->[CLS])
        others = [1, 2, 4, 5, 6]
        np.testing.assert_array_equal(bias[h][np.ix_(others, [0, 3])], o2c)
    # Row 0 of the table never reaches the bias once [CLS] is reset.
    moved = {**params, "pos": params["pos"].at[0].set(5.0)}
    np.testing.assert_array_equal(scheme.bias(moved, pos, pos), bias[None])
    # Without the reset, position 0 is an ordinary position.
    plain = Tupe(cls_reset=False).bias(params, pos, pos)
    assert not np.allclose(plain[0, :, 0], bias[:, 0])


@pytest.mark.slow
def test_tiles_concatenated_equal_whole():
    scheme = Tupe(relative=True, num_buckets=8, max_distance=16)
    scheme = scheme.bind(DIMS)
    params = scheme.init_layer(jax.random.key(1))
    pos = jnp.array([[0, 1, 2, 3, 0, 1]], jnp.int32)
    whole = scheme.bias(params, pos, pos)
    rows = [jnp.concatenate([scheme.bias(params, pos[:, i:i + 3], pos[:, j:j + 2])
                             for j in (0, 2, 4)], axis=-1) for i in (0, 3)]
    np.testing.assert_allclose(jnp.concatenate(rows, axis=2), whole, atol=1e-6)


def test_scales_and_sharing():
    assert math.isclose(Tupe().logit_scale(64), 1 / math.sqrt(128))
    assert Tupe().share_layers is True and Tupe(share_layers=False).share_layers is False
    params = Tupe().bind(DIMS).init_layer(jax.random.key(0))
    assert params["pos"].shape == (L, E) and "rel_table" not in params
    assert Tupe(relative=True).bind(DIMS).init_layer(jax.random.key(0))["rel_table"].shape == (33, H)


@pytest.mark.slow
def test_gradients_wrt_params():
    scheme = Tupe(relative=True, num_buckets=4, max_distance=8)
    params = scheme.bind(Dims(num_heads=1, head_dim=2, hidden=2,
                                                       max_length=4)).init_layer(jax.random.key(2))
    params = jax.tree.map(lambda x: x + 0.3, params)
    pos = _pos(4)
    names = ("pos", "proj_q", "bias_k", "theta_cls_to_other", "theta_other_to_cls", "rel_table")

    def f(*leaves):
        return scheme.bias({**params, **dict(zip(names, leaves))}, pos, pos)

    check_grads(f, tuple(params[n] for n in names), order=1, modes=("rev",),
                atol=1e-2, rtol=1e-2)


def test_length_beyond_table_raises():
    with pytest.raises(ConfigError, match="^length=8 .*max_length=7"):
        Tupe().check(DIMS, L + 1)


@pytest.mark.parametrize("fields,field", [
    ({"relative": True, "num_buckets": 7}, "num_buckets"),
    ({"relative": True, "max_distance": 2}, "max_distance"),
    ({"cls_reset": "no"}, "cls_reset"),
])
def test_bad_configs_raise(fields, field):
    with pytest.raises(ConfigError, match=f"position.{field}"):
        make({"name": "tupe", **fields}).check(DIMS, 4)


def test_relative_buckets_rejected_for_causal_models():
    causal = Dims(num_heads=H, head_dim=D, hidden=E, max_length=L, causal=True)
    Tupe().check(causal, 4)
    with pytest.raises(ConfigError, match="position.relative"):
        Tupe(relative=True).check(causal, 4)
