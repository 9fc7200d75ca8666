"""Tests for posjax/positions/absolute.py: learned, hierarchical, sinusoidal, multiplicative."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from posjax.errors import ConfigError
from posjax.positions import make
from posjax.positions.absolute import (
    hierarchical_embedding,
    hierarchical_table,
    sinusoidal_embedding,
    sinusoidal_table,
)
from posjax.positions.base import Dims

DIMS = Dims(num_heads=2, head_dim=4, hidden=8, max_length=6, vocab_size=13)


def _inputs(batch=2, length=5, width=8, dtype=jnp.float32, seed=0):
    x = jax.random.normal(jax.random.key(seed), (batch, length, width), jnp.float32).astype(dtype)
    pos = jnp.tile(jnp.arange(length, dtype=jnp.int32), (batch, 1))
    ids = jnp.arange(batch * length, dtype=jnp.int32).reshape(batch, length) % DIMS.vocab_size
    return x, pos, ids


# -- numpy re-implementations of the references ------------------------------------------
def _bert4keras_sinusoidal(pos, dim, base=10000.0):
    # bert4keras/backend.py sinusoidal_embeddings: pow(base, -2i/dim), stack([sin, cos], -1),
    # flatten the last two axes -> sin on even dims, cos on odd dims.
    idx = np.arange(dim // 2, dtype=np.float64)
    ang = np.asarray(pos, np.float64)[..., None] * base ** (-2 * idx / dim)
    return np.stack([np.sin(ang), np.cos(ang)], -1).reshape(*ang.shape[:-1], dim)


def _bert4keras_hierarchical(table, position_ids, alpha):
    # bert4keras/layers.py PositionEmbedding.call with hierarchical=alpha:
    # embeddings = (E - alpha*E[:1]) / (1-alpha); gather at ids // n and ids % n.
    table = np.asarray(table, np.float64)
    n = table.shape[0]
    u = (table - alpha * table[:1]) / (1 - alpha)
    return alpha * u[position_ids // n] + (1 - alpha) * u[position_ids % n]


# -- sinusoidal -----------------------------------------------------------------------------
def test_sinusoidal_golden_by_hand():
    # dim 4: inverse frequencies 10000**0 = 1 and 10000**(-2/4) = 0.01.
    got = np.asarray(sinusoidal_table(3, 4))
    want = np.array(
        [
            [0.0, 1.0, 0.0, 1.0],
            [np.sin(1.0), np.cos(1.0), np.sin(0.01), np.cos(0.01)],
            [np.sin(2.0), np.cos(2.0), np.sin(0.02), np.cos(0.02)],
        ]
    )
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_sinusoidal_matches_bert4keras_convention():
    pos = np.array([[0, 3, 17, 511], [1, 2, 4096, 9]])
    got = np.asarray(sinusoidal_embedding(pos, 10))
    # float32 angles: |error| <= ulp(4096 rad) ~ 5e-4
    np.testing.assert_allclose(got, _bert4keras_sinusoidal(pos, 10), atol=1e-3)
    np.testing.assert_allclose(
        np.asarray(sinusoidal_table(6, 10)), _bert4keras_sinusoidal(np.arange(6), 10), atol=1e-6
    )


def test_sinusoidal_odd_dim_raises():
    with pytest.raises(ConfigError, match="dim=5"):
        sinusoidal_table(4, 5)
    with pytest.raises(ConfigError, match="model.hidden"):
        make("sinusoidal").check(Dims(2, 4, 7, 16), 4)
    with pytest.raises(ConfigError, match="position.base"):
        make("sinusoidal", base=0.5)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_sinusoidal_embed(dtype):
    scheme = make({"name": "sinusoidal"})
    x, pos, ids = _inputs(dtype=dtype)
    pos = pos + jnp.array([[0], [256]])  # second row at 256..260: bf16 positions would collide
    out = scheme.embed(scheme.bind(DIMS).init_embed(jax.random.key(0)), x, pos, ids)
    assert out.dtype == dtype and out.shape == x.shape
    want = np.asarray(x, np.float32) + _bert4keras_sinusoidal(np.asarray(pos), 8)
    np.testing.assert_allclose(
        np.asarray(out, np.float32), want, atol=2e-2 if dtype == jnp.bfloat16 else 1e-5
    )
    # angles stay float32: positions 256 and 257 get distinct vectors even for bf16 inputs
    assert not np.allclose(
        np.asarray(out[1, 0] - x[1, 0], np.float32), np.asarray(out[1, 1] - x[1, 1], np.float32)
    )


def test_sinusoidal_scale_fixed_and_learned():
    x, pos, ids = _inputs()
    waves = _bert4keras_sinusoidal(np.asarray(pos), 8)
    fixed = make({"name": "sinusoidal", "scale": 0.25})
    assert fixed.bind(DIMS).init_embed(jax.random.key(0)) == {}
    np.testing.assert_allclose(fixed.embed({}, x, pos, ids), np.asarray(x) + 0.25 * waves,
                               atol=1e-6)
    # x-transformers' ScaledSinusoidalEmbedding: a learnable scalar starting at hidden**-0.5.
    learned = make({"name": "sinusoidal", "learned_scale": True})
    params = learned.bind(DIMS).init_embed(jax.random.key(0))
    np.testing.assert_allclose(params["scale"], 8 ** -0.5, rtol=1e-6)
    np.testing.assert_allclose(learned.embed(params, x, pos, ids),
                               np.asarray(x) + 8 ** -0.5 * waves, atol=1e-6)
    grad = jax.grad(lambda p: jnp.sum(learned.embed(p, x, pos, ids) * x))(params)["scale"]
    np.testing.assert_allclose(grad, np.sum(np.asarray(x) * waves), rtol=1e-4)
    check_grads(lambda s: learned.embed({"scale": s}, x, pos, ids), (params["scale"],), order=2)
    start = make({"name": "sinusoidal", "learned_scale": True, "scale": 0.5})
    assert float(start.bind(DIMS).init_embed(jax.random.key(0))["scale"]) == 0.5
    for bad in (0.0, -1.0, float("inf"), True):
        with pytest.raises(ConfigError, match="position.scale"):
            make({"name": "sinusoidal", "scale": bad})


# -- hierarchical --------------------------------------------------------------------------
def test_hierarchical_matches_bert4keras_formula():
    n, e = 5, 3
    table = jax.random.normal(jax.random.key(1), (n, e))
    ids = np.arange(n * n)
    for alpha in (0.4, 0.2, 0.9):
        got = np.asarray(hierarchical_table(table, n * n, alpha))
        np.testing.assert_allclose(
            got, _bert4keras_hierarchical(table, ids, alpha), rtol=1e-5, atol=1e-6
        )


def test_hierarchical_reproduces_table_below_n_and_reaches_n_squared():
    n, e = 7, 4
    table = jax.random.normal(jax.random.key(2), (n, e))
    full = np.asarray(hierarchical_table(table, n * n))
    assert full.shape == (n * n, e) and np.isfinite(full).all()
    np.testing.assert_allclose(full[:n], np.asarray(table), rtol=1e-6, atol=1e-6)
    # every one of the n*n positions gets its own vector (alpha != 0.5)
    rounded = {tuple(np.round(r, 5)) for r in full}
    assert len(rounded) == n * n
    with pytest.raises(ConfigError, match="length=50"):
        hierarchical_table(table, n * n + 1)


def test_alpha_one_half_collides_which_is_why_it_is_refused():
    table = np.random.default_rng(0).normal(size=(4, 3))
    q = _bert4keras_hierarchical(table, np.array([1 * 4 + 2, 2 * 4 + 1]), 0.5)
    np.testing.assert_allclose(q[0], q[1])  # (1, 2) and (2, 1) coincide
    with pytest.raises(ConfigError, match="position.alpha=0.5.*coincide"):
        make("hierarchical", alpha=0.5)


@pytest.mark.parametrize("alpha", [0, 1, 1.5, -0.1, "0.4", True, None])
def test_hierarchical_alpha_range(alpha):
    with pytest.raises(ConfigError, match="position.alpha"):
        make({"name": "hierarchical", "alpha": alpha})


def test_hierarchical_check_and_nan_fill_inside_jit():
    scheme = make("hierarchical", rows=4)
    scheme.check(DIMS, 16)  # 4 rows reach 16 positions
    with pytest.raises(ConfigError, match="position.rows=4.*17"):
        scheme.check(DIMS, 17)
    scheme = scheme.bind(DIMS)
    params = scheme.init_embed(jax.random.key(0))
    assert params["table"].shape == (4, 8)
    x = jnp.zeros((1, 4, 8))
    out = jax.jit(scheme.embed)(params, x, jnp.array([[15, 16, -1, 3]]), None)
    assert np.isfinite(out[0, 0]).all() and np.isfinite(out[0, 3]).all()
    assert np.isnan(out[0, 1]).all() and np.isnan(out[0, 2]).all()


def test_hierarchical_loads_a_learned_table_as_is():
    learned, hier = make("learned"), make("hierarchical")
    params = learned.bind(DIMS).init_embed(jax.random.key(3))
    assert jax.tree.structure(params) == jax.tree.structure(
        hier.bind(DIMS).init_embed(jax.random.key(3))
    )
    x, pos, ids = _inputs(length=DIMS.max_length)
    np.testing.assert_allclose(
        hier.embed(params, x, pos, ids), learned.embed(params, x, pos, ids), rtol=1e-6, atol=1e-6
    )
    long_pos = jnp.array([[6, 7, 35]])
    assert np.isfinite(hier.embed(params, jnp.zeros((1, 3, 8)), long_pos, None)).all()


def test_hierarchical_gathers_only_requested_positions():
    # positions given explicitly (e.g. an offset window deep into the n*n range)
    table = jax.random.normal(jax.random.key(4), (6, 2))
    pos = jnp.array([[30, 31], [35, 0]])
    got = np.asarray(hierarchical_embedding(table, pos))
    np.testing.assert_allclose(
        got, _bert4keras_hierarchical(table, np.asarray(pos), 0.4), rtol=1e-5, atol=1e-6
    )


# -- learned ----------------------------------------------------------------------------------
def test_learned_init_is_bert_truncated_normal():
    table = np.asarray(
        make("learned", rows=64).bind(Dims(2, 32, 64, 8)).init_embed(jax.random.key(0))["table"]
    )
    assert table.shape == (64, 64) and table.dtype == np.float32
    assert np.abs(table).max() <= 0.04 + 1e-7  # cut at 2 std
    assert 0.012 < table.std() < 0.02  # std of a 2-sigma-truncated N(0, 0.02) is ~0.0176


def test_learned_check_names_field_value_and_hierarchical():
    scheme = make("learned")
    scheme.check(DIMS, DIMS.max_length)
    with pytest.raises(ConfigError) as err:
        scheme.check(DIMS, DIMS.max_length + 1)
    assert err.value.field == "position.rows" and err.value.value == DIMS.max_length
    assert "hierarchical" in str(err.value) and "7" in str(err.value)
    make("learned", rows=20).check(DIMS, 20)


@pytest.mark.parametrize("rows", [0, -3, 2.5, True, "8"])
def test_learned_rows_validated(rows):
    with pytest.raises(ConfigError, match="position.rows"):
        make("learned", rows=rows)


def test_learned_embed_and_nan_fill_inside_jit():
    scheme = make("learned")
    scheme = scheme.bind(DIMS)
    params = scheme.init_embed(jax.random.key(0))
    x, pos, ids = _inputs()
    out = scheme.embed(params, x, pos, ids)
    np.testing.assert_allclose(out, x + params["table"][pos], rtol=1e-6)
    # past the table (6 rows) and negative: NaN rows, never the clamped last/first row
    bad = jnp.array([[0, 5, 6, 1000, -1]])
    out = jax.jit(scheme.embed)(params, jnp.zeros((1, 5, 8)), bad, None)
    assert np.isfinite(out[0, :2]).all()
    assert np.isnan(out[0, 2:]).all()


@pytest.mark.parametrize("name", ["learned", "hierarchical", "multiplicative"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_table_schemes_dtype(name, dtype):
    scheme = make(name)
    scheme = scheme.bind(DIMS)
    params = scheme.init_embed(jax.random.key(0))
    assert params["table"].dtype == jnp.float32
    x, pos, ids = _inputs(dtype=dtype)
    out = scheme.embed(params, x, pos, ids)
    assert out.dtype == dtype and out.shape == x.shape
    ref = scheme.embed(params, x.astype(jnp.float32), pos, ids)
    np.testing.assert_allclose(np.asarray(out, np.float32), ref, atol=3e-2)


@pytest.mark.slow
def test_table_gradients():
    # Gradients of a scalar loss w.r.t. each learnable table (float64 finite differences).
    with jax.enable_x64(True):
        x = jax.random.normal(jax.random.key(0), (2, 4, 3), jnp.float64)
        w = jax.random.normal(jax.random.key(1), (2, 4, 3), jnp.float64)
        for name, pos in [
            ("learned", jnp.array([[0, 1, 2, 3], [3, 3, 0, 1]])),
            ("multiplicative", jnp.array([[0, 1, 2, 3], [3, 3, 0, 1]])),
            ("hierarchical", jnp.array([[0, 5, 9, 15], [4, 7, 1, 12]])),  # past the 4 rows
        ]:
            scheme = make(name)
            table = jax.random.normal(jax.random.key(2), (4, 3), jnp.float64)

            def loss(t, scheme=scheme, pos=pos):
                return jnp.sum(scheme.embed({"table": t}, x, pos, None) * w)

            check_grads(loss, (table,), order=1, modes=("rev",))
            if name == "learned":  # exact: d loss / d table[k] = sum of w at positions k
                want = np.zeros((4, 3))
                np.add.at(want, np.asarray(pos).reshape(-1), np.asarray(w).reshape(-1, 3))
                np.testing.assert_allclose(jax.grad(loss)(table), want, atol=1e-12)


# -- multiplicative / none ---------------------------------------------------------------------
def test_multiplicative_is_x_times_one_plus_p():
    # bert4keras layers.py PositionEmbedding merge_mode='mul': inputs * (embeddings + 1.0)
    scheme = make("multiplicative")
    table = jnp.arange(6 * 8, dtype=jnp.float32).reshape(6, 8) / 100.0
    x, pos, ids = _inputs()
    out = scheme.embed({"table": table}, x, pos, ids)
    np.testing.assert_allclose(out, x * (1.0 + table[pos]), rtol=1e-6)
    np.testing.assert_allclose(
        scheme.embed({"table": jnp.zeros((6, 8))}, x, pos, ids), x
    )  # zero table: identity
    init = scheme.bind(DIMS).init_embed(jax.random.key(0))
    np.testing.assert_allclose(
        scheme.embed(init, x, pos, ids), x, rtol=0.05, atol=1e-6
    )  # starts identity-ish
    with pytest.raises(ConfigError, match="position.rows=6"):
        scheme.check(DIMS, 7)
    out = jax.jit(scheme.embed)({"table": table}, x, pos + 3, ids)
    assert np.isnan(out[:, 3:]).all() and np.isfinite(out[:, :3]).all()


def test_none_has_no_hooks():
    scheme = make("none")
    assert scheme.hooks == () and scheme.embed is None
    assert scheme.bind(DIMS).init_embed(jax.random.key(0)) == {}
    scheme.check(DIMS, 10**6)
