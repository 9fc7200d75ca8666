"""Tests for posjax/positions/xl.py: Transformer-XL relative attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from posjax.errors import ConfigError
from posjax.positions import make
from posjax.positions.base import Dims
from posjax.positions.xl import TransformerXL, _per_head_projection, xl_sinusoid
from posjax.tiling.tiles import factored_raw

B, H, D = 2, 2, 4
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)


def _inputs(lq, lk, seed=0, dtype=jnp.float32):
    r = jax.random.split(jax.random.key(seed), 2)
    q = jax.random.normal(r[0], (B, lq, H, D), jnp.float32).astype(dtype)
    k = jax.random.normal(r[1], (B, lk, H, D), jnp.float32).astype(dtype)
    return q, k


def _content_logits(scheme, params, q, k, q_pos, k_pos):
    """What the hook adds to q.k (its factored raw logits minus q.k): u.k_j + (q_i+v).W_r R."""
    return (factored_raw(scheme, params, q, k, q_pos, k_pos)
            - jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32))


def _xl_sinusoid_np(distance, rel_dim):
    # kimiyoung/transformer-xl PositionalEmbedding: inv_freq = 1/10000^(arange(0, d, 2)/d),
    # pos_emb = cat([sin(pos*inv_freq), cos(pos*inv_freq)], -1).
    inv_freq = 1.0 / (10000.0 ** (np.arange(0.0, rel_dim, 2.0) / rel_dim))
    ang = np.asarray(distance, np.float64)[..., None] * inv_freq
    return np.concatenate([np.sin(ang), np.cos(ang)], axis=-1)


def _naive_raw(params, q, k, q_pos, k_pos):
    """(q+u).k + (q+v).(W_r R_{i-j}) with the explicit [B, Lq, Lk, d_R] tensor of R."""
    p = {n: np.asarray(v, np.float64) for n, v in params.items()}
    qn, kn = np.asarray(q, np.float64), np.asarray(k, np.float64)
    dist = np.asarray(q_pos)[:, :, None] - np.asarray(k_pos)[:, None, :]  # i - j
    r = _xl_sinusoid_np(dist, p["w_r"].shape[0])  # [B, Lq, Lk, d_R]
    wr = np.einsum("bqkf,fhd->bqkhd", r, p["w_r"])
    ac = np.einsum("bqhd,bkhd->bhqk", qn + p["u"], kn)
    bd = np.einsum("bqhd,bqkhd->bhqk", qn + p["v"], wr)
    return ac + bd


def _rel_shift(x):
    # kimiyoung/transformer-xl MemTransformerLM _rel_shift on a [qlen, klen] matrix.
    qlen, klen = x.shape
    padded = np.concatenate([np.zeros((qlen, 1)), x], axis=1).reshape(klen + 1, qlen)
    return padded[1:].reshape(qlen, klen)


def test_sinusoid_matches_xl_positional_embedding():
    d = np.arange(-5, 6)
    np.testing.assert_allclose(xl_sinusoid(jnp.asarray(d), 8), _xl_sinusoid_np(d, 8), atol=1e-6)


@pytest.mark.slow
def test_content_logits_equal_naive_formula_both_signs():
    scheme = TransformerXL()
    scheme = scheme.bind(DIMS)
    params = scheme.init_layer(jax.random.key(0))
    params = jax.tree.map(lambda x: x * 10, params)  # make the position term visible
    assert params["w_r"].shape == (DIMS.hidden, H, D)
    q, k = _inputs(5, 7)
    q_pos = jnp.array([[2, 3, 4, 5, 6], [0, 1, 2, 0, 1]], jnp.int32)  # i - j takes both signs
    k_pos = jnp.array([[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 0, 1, 2]], jnp.int32)
    got = jnp.einsum("bqhd,bkhd->bhqk", q, k) + _content_logits(scheme, params, q, k, q_pos, k_pos)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, _naive_raw(params, q, k, q_pos, k_pos), atol=1e-4)


@pytest.mark.parametrize("rel_dim", [None, 6])
def test_the_factors_give_the_content_term_formula(rel_dim):
    # content_factors' (q', q_extra, k_extra): q'.k + q_extra.k_extra - q.k is XL's term
    # u.k_j + (q_i + v).W_r R(p_i - p_j), R the sinusoid, written out here in float64, at
    # positions with gaps and both signs of p_i - p_j; k_extra is shared by the heads.
    scheme = TransformerXL(rel_dim=rel_dim).bind(DIMS)
    params = jax.tree.map(lambda x: x * 10, scheme.init_layer(jax.random.key(11)))
    q, k = _inputs(5, 6, seed=12)
    q_pos = jnp.array([[3, 9, 40, 41, 77], [0, 1, 2, 3, 4]], jnp.int32)
    k_pos = jnp.array([[0, 9, 13, 60, 61, 100], [5, 4, 3, 2, 1, 0]], jnp.int32)
    q_content, q_extra, k_extra = scheme.content_factors(params, q, k, q_pos, k_pos)
    rel = DIMS.hidden if rel_dim is None else rel_dim
    assert q_extra.shape == (B, 5, H, rel) and k_extra.shape == (B, 6, 1, rel)
    got = (np.einsum("bqhd,bkhd->bhqk", np.float64(q_content) - np.float64(q), np.float64(k))
           + np.einsum("bqhf,bkf->bhqk", np.float64(q_extra), np.float64(k_extra[:, :, 0])))
    p = {n: np.asarray(x, np.float64) for n, x in params.items()}
    qn, kn = np.asarray(q, np.float64), np.asarray(k, np.float64)
    r = _xl_sinusoid_np(np.asarray(q_pos)[:, :, None] - np.asarray(k_pos)[:, None, :], rel)
    want = (np.einsum("hd,bkhd->bhk", p["u"], kn)[:, :, None, :]
            + np.einsum("bqhd,bqkf,fhd->bhqk", qn + p["v"], r, p["w_r"]))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_matches_relative_shift_on_the_causal_triangle():
    # The original algorithm: BD for distances klen-1..0, then _rel_shift. Valid for j <= i.
    length = 6
    scheme = TransformerXL(rel_dim=6)
    params = jax.tree.map(lambda x: x * 10, scheme.bind(DIMS).init_layer(jax.random.key(1)))
    q, k = _inputs(length, length, seed=2)
    pos = jnp.tile(jnp.arange(length, dtype=jnp.int32), (B, 1))
    got = np.asarray(jnp.einsum("bqhd,bkhd->bhqk", q, k)
                     + _content_logits(scheme, params, q, k, pos, pos))
    p = {n: np.asarray(v, np.float64) for n, v in params.items()}
    r = _xl_sinusoid_np(np.arange(length - 1, -1, -1), 6)  # pos_seq = klen-1 ... 0
    r_head_k = np.einsum("mf,fhd->mhd", r, p["w_r"])
    tril = np.tril(np.ones((length, length), bool))
    for b in range(B):
        for h in range(H):
            qn, kn = np.asarray(q[b, :, h], np.float64), np.asarray(k[b, :, h], np.float64)
            ac = (qn + p["u"][h]) @ kn.T
            bd = _rel_shift((qn + p["v"][h]) @ r_head_k[:, h].T)
            np.testing.assert_allclose(got[b, h][tril], (ac + bd)[tril], atol=1e-4)


def test_randomized_positions_and_tiles():
    # Sorted random positions (Ruoss et al. randomized encodings): any gaps, tile by tile.
    scheme = TransformerXL(rel_dim=4)
    params = jax.tree.map(lambda x: x * 10, scheme.bind(DIMS).init_layer(jax.random.key(3)))
    q, k = _inputs(8, 8, seed=4)
    rng = np.random.default_rng(0)
    pos = jnp.asarray(np.sort(np.stack([rng.choice(300, 8, replace=False) for _ in range(B)]), 1),
                      jnp.int32)
    whole = _content_logits(scheme, params, q, k, pos, pos)
    raw = jnp.einsum("bqhd,bkhd->bhqk", q, k) + whole
    np.testing.assert_allclose(raw, _naive_raw(params, q, k, pos, pos), atol=2e-3)
    rows = [jnp.concatenate([_content_logits(scheme, params, q[:, i:i + 4], k[:, j:j + 4],
                                                   pos[:, i:i + 4], pos[:, j:j + 4])
                             for j in (0, 4)], axis=-1) for i in (0, 4)]
    np.testing.assert_allclose(jnp.concatenate(rows, axis=2), whole, atol=1e-5)


def test_bfloat16_inputs():
    scheme = TransformerXL()
    params = jax.tree.map(lambda x: x * 10, scheme.bind(DIMS).init_layer(jax.random.key(5)))
    q, k = _inputs(6, 6, seed=6)
    pos = jnp.tile(jnp.arange(6, dtype=jnp.int32), (B, 1))
    ref = _content_logits(scheme, params, q, k, pos, pos)
    got = _content_logits(scheme, params, q.astype(jnp.bfloat16), k.astype(jnp.bfloat16), pos, pos)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, ref, atol=0.03 * float(jnp.max(jnp.abs(ref))))


def test_gradients_wrt_u_v_and_w_r():
    scheme = TransformerXL(rel_dim=4)
    scheme = scheme.bind(DIMS)
    params = scheme.init_layer(jax.random.key(7))
    q, k = _inputs(3, 4, seed=8)
    q_pos = jnp.tile(jnp.arange(2, 5, dtype=jnp.int32), (B, 1))
    k_pos = jnp.tile(jnp.arange(4, dtype=jnp.int32), (B, 1))

    def f(u, v, w_r):
        return _content_logits(scheme, {"u": u, "v": v, "w_r": w_r}, q, k, q_pos, k_pos)

    check_grads(f, (params["u"], params["v"], params["w_r"]), order=1, modes=("rev",),
                atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("rel_dim", [3, 0, -2, 2.0])
def test_bad_rel_dim_raises(rel_dim):
    with pytest.raises(ConfigError, match="position.rel_dim"):
        make({"name": "xl", "rel_dim": rel_dim}).check(DIMS, 16)


def test_default_rel_dim_is_model_width_and_odd_width_is_rejected():
    TransformerXL().check(DIMS, 16)
    odd = Dims(num_heads=1, head_dim=3, hidden=3, max_length=8)
    with pytest.raises(ConfigError, match="position.rel_dim"):
        TransformerXL().check(odd, 8)


@pytest.mark.parametrize("w_r_init,stddev", [("normal", 0.02), ("fan_in", 1 / np.sqrt(64))])
def test_w_r_init_xl_or_haikus_linear(w_r_init, stddev):
    """'fan_in': the reference's hk.Linear over R (stddev 1/sqrt(d_R), truncated at 2 stddev,
    which leaves 0.8796 of it); u and v stay N(0, 0.02^2) either way."""
    dims = Dims(num_heads=8, head_dim=8, hidden=64, max_length=64)
    scheme = make({"name": "xl", "w_r_init": w_r_init}).bind(dims)
    params = scheme.init_layer(jax.random.key(0))
    w = np.asarray(params["w_r"])
    assert w.shape == (64, 8, 8)
    spread = stddev * (0.8796 if w_r_init == "fan_in" else 1.0)
    assert w.std() == pytest.approx(spread, rel=0.08)
    if w_r_init == "fan_in":
        assert np.abs(w).max() <= 2 * stddev * (1 + 1e-6)
    assert np.asarray(params["u"]).std() == pytest.approx(0.02, rel=0.3)
    with pytest.raises(ConfigError, match="position.w_r_init"):
        make({"name": "xl", "w_r_init": "xavier"}).check(dims, 16)


@pytest.mark.parametrize("dim", [4, 8, 32])
def test_per_head_projection_is_each_heads_own_product(dim):
    # small heads take one block-diagonal matmul, larger ones the per-head einsum: both are
    # x_h . w_h for every head h, values and gradients
    r = jax.random.split(jax.random.key(3), 2)
    x = jax.random.normal(r[0], (2, 5, 3, dim), jnp.float32)
    w = jax.random.normal(r[1], (6, 3, dim), jnp.float32)

    def naive(x, w):
        return jnp.stack([x[:, :, h] @ w[:, h].T for h in range(3)], axis=2)

    np.testing.assert_allclose(_per_head_projection(x, w), naive(x, w), rtol=1e-5,
                               atol=1e-5)
    g = jax.grad(lambda x, w: jnp.sum(jnp.sin(_per_head_projection(x, w))), (0, 1))(x, w)
    gn = jax.grad(lambda x, w: jnp.sum(jnp.sin(naive(x, w))), (0, 1))(x, w)
    for got, want in zip(g, gn):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
