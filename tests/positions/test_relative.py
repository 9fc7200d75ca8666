"""Tests for posjax/positions/relative.py (Shaw, NEZHA, nezha_table) and relative_ops.py."""

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
from posjax.positions.relative import Nezha, Shaw, clipped_index, nezha_table

B, H, D = 2, 2, 4
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=32)


def _qkv(lq=6, lk=6, seed=0, dtype=jnp.float32, d=D):
    r = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(r[0], (B, lq, H, d), jnp.float32).astype(dtype)
    k = jax.random.normal(r[1], (B, lk, H, d), jnp.float32).astype(dtype)
    p = jax.random.uniform(r[2], (B, H, lq, lk), jnp.float32)
    return q, k, p


def _arange_pos(length, offset=0):
    return jnp.tile(jnp.arange(offset, offset + length, dtype=jnp.int32), (B, 1))


# -- numpy mirrors of the references ------------------------------------------------------
def _hf_nezha_table(max_relative_position, depth):
    # HF transformers models/deprecated/nezha/modeling_nezha.py NezhaRelativePositionsEncoding:
    # position = arange(0, 2K+1); div_term = exp(arange(0, depth, 2) * (-log(10000)/depth));
    # table[:, 0::2] = sin(position*div_term); table[:, 1::2] = cos(position*div_term).
    vocab = 2 * max_relative_position + 1
    table = np.zeros((vocab, depth))
    position = np.arange(vocab, dtype=np.float64)[:, None]
    div_term = np.exp(np.arange(0, depth, 2) * (-math.log(10000.0) / depth))
    table[:, 0::2] = np.sin(position * div_term)
    table[:, 1::2] = np.cos(position * div_term)
    return table


def _hf_nezha_final_mat(length, k):
    # range_mat = arange(L).repeat(L).view(L, L); distance = range_mat - range_mat.T -> j - i.
    range_mat = np.tile(np.arange(length), length).reshape(length, length)
    distance = range_mat - range_mat.T
    return np.clip(distance, -k, k) + k


def _naive_logits(q, table, q_pos, k_pos, k):
    # The [B, Lq, Lk, D] tensor of a_ij that the hooks must never build.
    idx = np.clip(np.asarray(k_pos)[:, None, :] - np.asarray(q_pos)[:, :, None], -k, k) + k
    rel = np.asarray(table, np.float64)[idx]
    return np.einsum("bqhd,bqkd->bhqk", np.asarray(q, np.float64), rel)


def _naive_values(p, table, q_pos, k_pos, k):
    idx = np.clip(np.asarray(k_pos)[:, None, :] - np.asarray(q_pos)[:, :, None], -k, k) + k
    rel = np.asarray(table, np.float64)[idx]
    return np.einsum("bhqk,bqkd->bqhd", np.asarray(p, np.float64), rel)


# -- nezha_table ---------------------------------------------------------------------------
def test_nezha_table_matches_hf_formula_and_has_129_rows():
    table = nezha_table(64, 64)
    assert table.shape == (129, 64) and table.dtype == jnp.float32
    np.testing.assert_allclose(table, _hf_nezha_table(64, 64), atol=1e-6)
    # Golden values: the sinusoid is evaluated at the SHIFTED index r (0..128).
    np.testing.assert_allclose(table[0], np.tile([0.0, 1.0], 32), atol=1e-7)
    np.testing.assert_allclose(table[1, :2], [math.sin(1.0), math.cos(1.0)], atol=1e-7)
    np.testing.assert_allclose(table[64, :2], [math.sin(64.0), math.cos(64.0)], atol=1e-6)
    np.testing.assert_allclose(table[128, 2:4], [math.sin(128 / 10000 ** (2 / 64)),
                                                 math.cos(128 / 10000 ** (2 / 64))], atol=1e-6)


def test_nezha_table_is_exported_and_handles_odd_depth():
    assert positions.nezha_table is nezha_table
    # Odd depth (HF would fail on the shape): column c uses frequency index c // 2.
    odd = nezha_table(3, 5)
    r = np.arange(7)[:, None]
    freq = 10000.0 ** (-np.array([0, 0, 2, 2, 4]) / 5)
    want = np.where(np.arange(5) % 2 == 0, np.sin(r * freq), np.cos(r * freq))
    np.testing.assert_allclose(odd, want, atol=1e-6)


def test_clipped_index_matches_hf_final_mat():
    pos = _arange_pos(9)
    idx = clipped_index(pos, pos, 3)
    np.testing.assert_array_equal(idx[0], _hf_nezha_final_mat(9, 3))
    assert int(idx.min()) == 0 and int(idx.max()) == 6
    assert int(idx[0, 4, 4]) == 3  # distance 0 is the middle row


# -- content hooks equal the naive [L, L, D] formulas --------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("cls", [Shaw, Nezha])
def test_content_hooks_equal_naive_formula(cls):
    scheme = cls(max_relative_position=2)
    scheme = scheme.bind(DIMS)
    params = scheme.init_layer(jax.random.key(1))
    q, k, p = _qkv(5, 7)
    # Positions need not be contiguous: an offset query block and packed keys.
    q_pos = jnp.array([[3, 4, 5, 6, 7], [0, 1, 2, 0, 1]], jnp.int32)
    k_pos = jnp.array([[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 0, 1, 2]], jnp.int32)
    keys = params["keys"] if cls is Shaw else nezha_table(2, D)
    values = params["values"] if cls is Shaw else nezha_table(2, D)
    got = scheme.content_logits(params, q, k, q_pos, k_pos)
    assert got.shape == (B, H, 5, 7) and got.dtype == jnp.float32
    np.testing.assert_allclose(got, _naive_logits(q, keys, q_pos, k_pos, 2), atol=1e-5)
    out = scheme.content_values(params, p, q_pos, k_pos)
    assert out.shape == (B, 5, H, D)
    np.testing.assert_allclose(out, _naive_values(p, values, q_pos, k_pos, 2), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("offset", [0, 8100])
def test_nezha_rotation_form_matches_the_table_far_out_with_gradients(offset):
    # NEZHA's hooks turn q by its position instead of gathering table rows; the table itself
    # evaluates the sinusoid at the small shifted distance exactly. Far from 0 the float32
    # angles (pos * w) carry about |pos| * 2^-24 rad of rounding, as RoPE's do.
    kmax, d = 3, 8
    dims = Dims(num_heads=H, head_dim=d, hidden=H * d, max_length=16384)
    scheme = Nezha(max_relative_position=kmax).bind(dims)
    q, _, p = _qkv(6, 11, seed=3, d=d)
    q_pos = _arange_pos(6, offset + 2)
    k_pos = jnp.stack([jnp.arange(offset, offset + 11), jnp.arange(offset + 11, offset, -1)]
                      ).astype(jnp.int32)  # in the band, past it on both sides, reversed
    table = nezha_table(kmax, d)
    angle_err = (offset + 16) * 2.0**-24 * 4
    tol_logits = float(np.abs(np.asarray(q)).sum(-1).max()) * angle_err + 1e-5
    tol_values = float(np.asarray(p).sum(-1).max()) * angle_err + 1e-5
    got = scheme.content_logits({}, q, None, q_pos, k_pos)
    np.testing.assert_allclose(got, _naive_logits(q, table, q_pos, k_pos, kmax), atol=tol_logits)
    out = scheme.content_values({}, p, q_pos, k_pos)
    np.testing.assert_allclose(out, _naive_values(p, table, q_pos, k_pos, kmax), atol=tol_values)
    # Gradients: both terms are linear, so d/dq and d/dprobs are the table rows themselves.
    wl = jax.random.normal(jax.random.key(7), got.shape)
    wv = jax.random.normal(jax.random.key(8), out.shape)
    dq = jax.grad(lambda q: (scheme.content_logits({}, q, None, q_pos, k_pos) * wl).sum())(q)
    dp = jax.grad(lambda p: (scheme.content_values({}, p, q_pos, k_pos) * wv).sum())(p)
    idx = np.clip(np.asarray(k_pos)[:, None, :] - np.asarray(q_pos)[:, :, None], -kmax, kmax) + kmax
    rel = np.asarray(table, np.float64)[idx]  # [B, Lq, Lk, D]
    np.testing.assert_allclose(dq, np.einsum("bhqk,bqkd->bqhd", np.asarray(wl, np.float64), rel),
                               atol=float(np.abs(np.asarray(wl)).sum(-1).max()) * angle_err + 1e-5)
    np.testing.assert_allclose(dp, np.einsum("bqhd,bqkd->bhqk", np.asarray(wv, np.float64), rel),
                               atol=float(np.abs(np.asarray(wv)).sum(-1).max()) * angle_err + 1e-5)


def test_nezha_attention_matches_hf_layout():
    # HF NezhaSelfAttention: scores = q.k + (q_t @ relations_keys^T) then / sqrt(d);
    # context = probs @ v + (probs_t @ relations_values).
    length, kk = 6, 2
    scheme = Nezha(max_relative_position=kk)
    scheme = scheme.bind(DIMS)
    params = scheme.init_layer(jax.random.key(0))
    q, k, _ = _qkv(length, length, seed=3)
    pos = _arange_pos(length)
    rel = _hf_nezha_table(kk, D)[_hf_nezha_final_mat(length, kk)]  # [L, L, D]
    qn, kn = np.asarray(q, np.float64), np.asarray(k, np.float64)
    scores = np.einsum("bihd,bjhd->bhij", qn, kn)
    q_t = qn.transpose(1, 0, 2, 3).reshape(length, B * H, D)  # [L, B*H, D]
    key_pos_scores = np.matmul(q_t, rel.transpose(0, 2, 1))  # [L, B*H, L]
    scores = scores + key_pos_scores.reshape(length, B, H, length).transpose(1, 2, 0, 3)
    raw = np.einsum("bihd,bjhd->bhij", qn, kn) + scheme.content_logits(params, q, k, pos, pos)
    np.testing.assert_allclose(raw, scores, atol=1e-5)
    probs = jax.nn.softmax(raw / math.sqrt(D), axis=-1)
    p_t = np.asarray(probs, np.float64).transpose(2, 0, 1, 3).reshape(length, B * H, length)
    val_pos = np.matmul(p_t, rel).reshape(length, B, H, D).transpose(1, 0, 2, 3)
    np.testing.assert_allclose(scheme.content_values(params, probs, pos, pos), val_pos,
                               atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [Shaw, Nezha])
def test_tiles_concatenated_equal_whole_sequence(cls):
    scheme = cls(max_relative_position=3)
    scheme = scheme.bind(DIMS)
    params = scheme.init_layer(jax.random.key(2))
    q, k, p = _qkv(8, 8, seed=4)
    pos = _arange_pos(8, offset=5)
    whole_l = scheme.content_logits(params, q, k, pos, pos)
    whole_v = scheme.content_values(params, p, pos, pos)
    bq = bk = 4
    rows_l, rows_v = [], []
    for i in range(0, 8, bq):
        cols, acc = [], 0.0
        for j in range(0, 8, bk):
            qs, ks = slice(i, i + bq), slice(j, j + bk)
            cols.append(scheme.content_logits(params, q[:, qs], k[:, ks], pos[:, qs], pos[:, ks]))
            acc = acc + scheme.content_values(params, p[:, :, qs, ks], pos[:, qs], pos[:, ks])
        rows_l.append(jnp.concatenate(cols, axis=-1))
        rows_v.append(acc)  # values are linear in probs: key tiles add up
    np.testing.assert_allclose(jnp.concatenate(rows_l, axis=2), whole_l, atol=1e-5)
    np.testing.assert_allclose(jnp.concatenate(rows_v, axis=1), whole_v, atol=1e-5)


@pytest.mark.parametrize("cls", [Shaw, Nezha])
def test_no_lq_lk_d_intermediate(cls):
    # Distinct sizes Lq=5, Lk=7, D=11 (K=4 -> 9 rows): no traced value may carry all three.
    dims = Dims(num_heads=1, head_dim=11, hidden=11, max_length=32)
    scheme = cls(max_relative_position=4)
    scheme = scheme.bind(dims)
    params = scheme.init_layer(jax.random.key(0))
    q = jnp.ones((1, 5, 1, 11))
    k = jnp.ones((1, 7, 1, 11))
    p = jnp.ones((1, 1, 5, 7))
    qp, kp = jnp.zeros((1, 5), jnp.int32), jnp.zeros((1, 7), jnp.int32)
    for fn, args in ((scheme.content_logits, (params, q, k, qp, kp)),
                     (scheme.content_values, (params, p, qp, kp))):
        jaxpr = jax.make_jaxpr(fn)(*args)
        for eqn in jaxpr.jaxpr.eqns:
            for var in eqn.outvars:
                shape = getattr(var.aval, "shape", ())
                assert not {5, 7, 11} <= set(shape), (eqn.primitive, shape)


# -- dtypes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [Shaw, Nezha])
def test_bfloat16_inputs_close_to_float32(cls):
    scheme = cls(max_relative_position=3)
    scheme = scheme.bind(DIMS)
    params = scheme.init_layer(jax.random.key(5))
    q32, k32, p32 = _qkv(6, 6, seed=6)
    pos = _arange_pos(6)
    ref_l = scheme.content_logits(params, q32, k32, pos, pos)
    ref_v = scheme.content_values(params, p32, pos, pos)
    got_l = scheme.content_logits(params, q32.astype(jnp.bfloat16), k32.astype(jnp.bfloat16),
                                  pos, pos)
    got_v = scheme.content_values(params, p32.astype(jnp.bfloat16), pos, pos)
    assert got_l.dtype == jnp.float32 and got_v.dtype == jnp.bfloat16
    scale = float(jnp.max(jnp.abs(ref_l))) + 1e-3
    np.testing.assert_allclose(got_l, ref_l, atol=0.02 * scale)
    np.testing.assert_allclose(got_v.astype(jnp.float32), ref_v, atol=0.03, rtol=0.03)


def test_nezha_has_no_params_and_reads_the_depth_from_its_dims():
    assert Nezha().bind(DIMS).init_layer(jax.random.key(0)) == {}
    probs, pos = jnp.ones((B, H, 2, 2)), _arange_pos(2)
    assert Nezha().bind(DIMS).content_values({}, probs, pos, pos).shape == (B, 2, H, D)
    with pytest.raises(ValueError, match="not bound"):
        Nezha().content_values({}, probs, pos, pos)


def test_under_jit_with_static_scheme():
    scheme = Shaw(max_relative_position=2)
    scheme = scheme.bind(DIMS)
    params = scheme.init_layer(jax.random.key(0))
    q, k, p = _qkv(4, 4)
    pos = _arange_pos(4)

    @jax.jit
    def f(params, q, k, p):
        return (scheme.content_logits(params, q, k, pos, pos),
                scheme.content_values(params, p, pos, pos))

    logits, values = f(params, q, k, p)
    np.testing.assert_allclose(logits, scheme.content_logits(params, q, k, pos, pos), atol=1e-6)
    np.testing.assert_allclose(values, scheme.content_values(params, p, pos, pos), atol=1e-6)


# -- gradients --------------------------------------------------------------------------------
@pytest.mark.slow
def test_shaw_gradients_wrt_tables_queries_and_probs():
    scheme = Shaw(max_relative_position=2)
    scheme = scheme.bind(DIMS)
    params = scheme.init_layer(jax.random.key(7))
    q, k, p = _qkv(4, 5, seed=8)
    q_pos, k_pos = _arange_pos(4, offset=1), _arange_pos(5)

    def logits(keys, q):
        return scheme.content_logits({"keys": keys}, q, k, q_pos, k_pos)

    def values(vals, p):
        return scheme.content_values({"values": vals}, p, q_pos, k_pos)

    check_grads(logits, (params["keys"], q), order=1, modes=("rev",), atol=1e-2, rtol=1e-2)
    check_grads(values, (params["values"], p), order=1, modes=("rev",), atol=1e-2, rtol=1e-2)
    # Clipping: with K=2 only rows 0..4 exist and far distances share the end rows.
    g = jax.grad(lambda t: jnp.sum(logits(t, q)))(params["keys"])
    assert g.shape == (5, D) and bool(jnp.all(jnp.isfinite(g)))


# -- config errors ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["shaw", "nezha"])
@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_bad_clip_distance_raises_config_error(name, bad):
    with pytest.raises(ConfigError, match="position.max_relative_position"):
        make({"name": name, "max_relative_position": bad}).check(DIMS, 16)


def test_registry_builds_relative_schemes_and_rejects_unknown_fields():
    assert isinstance(make("shaw"), Shaw) and make("nezha").max_relative_position == 64
    with pytest.raises(ConfigError, match="position.clip"):
        make({"name": "nezha", "clip": 3})
