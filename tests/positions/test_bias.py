"""ALiBi, KERPLE and Sandwich bias hooks: golden slopes, reference formulas in numpy, the
defining properties (translation invariance, tile-wise evaluation) and gradients."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from posjax.errors import ConfigError
from posjax.positions import registry
from posjax.positions.base import Dims
from posjax.positions.bias import (
    Alibi,
    Kerple,
    Sandwich,
    alibi_slopes,
    kerple_bias,
    abs_distance,
    sandwich_bias,
)

DIMS = Dims(num_heads=4, head_dim=8, hidden=32, max_length=64)
DIMS12 = Dims(num_heads=12, head_dim=8, hidden=96, max_length=64)


def positions(batch, length, seed=0, high=50):
    """Sorted distinct positions per row: explicit and non-contiguous, as packing and
    randomized positions produce."""
    rng = np.random.default_rng(seed)
    rows = [np.sort(rng.choice(high, length, replace=False)) for _ in range(batch)]
    return jnp.asarray(np.stack(rows), jnp.int32)


def np_rel(q_pos, k_pos):
    q, k = np.asarray(q_pos, np.float64), np.asarray(k_pos, np.float64)
    return q[:, :, None] - k[:, None, :]  # i - j, [B, Lq, Lk]


def make_params(scheme, dims=DIMS, seed=0):
    return scheme.bind(dims).init_layer(jax.random.PRNGKey(seed))


# -- ALiBi ------------------------------------------------------------------------------


def test_alibi_golden_slopes():
    # Literal outputs of get_slopes(n) in ofirpress/attention_with_linear_biases
    # fairseq/models/transformer.py (also NeMo alibi_relative_position_embedding.get_slopes).
    np.testing.assert_allclose(
        alibi_slopes(8),
        [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625],
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        alibi_slopes(12),
        [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625,
         0.7071067811865476, 0.35355339059327384, 0.17677669529663692, 0.08838834764831849],
        rtol=1e-12,
    )


@pytest.mark.parametrize("bad", [0, -4, 2.5, True, None])
def test_alibi_slopes_bad_heads(bad):
    with pytest.raises(ConfigError, match="num_heads"):
        alibi_slopes(bad)


def test_alibi_symmetric_and_one_sided():
    q_pos, k_pos = positions(2, 5, seed=1), positions(2, 7, seed=2)
    rel = np_rel(q_pos, k_pos)
    slopes = alibi_slopes(12)[None, :, None, None]
    default = Alibi()
    bias = default.bind(DIMS12).bias(make_params(default, DIMS12), q_pos, k_pos)
    assert bias.shape == (2, 12, 5, 7) and bias.dtype == jnp.float32
    np.testing.assert_allclose(bias, -slopes * np.abs(rel)[:, None], rtol=1e-6)

    one_sided = Alibi(symmetric=False)
    b1 = np.asarray(one_sided.bind(DIMS12).bias(make_params(one_sided, DIMS12), q_pos, k_pos))
    np.testing.assert_allclose(b1, -slopes * np.maximum(rel, 0)[:, None], rtol=1e-6)
    # Same numbers wherever a causal mask keeps the pair (key at or before the query).
    keep = np.broadcast_to((rel >= 0)[:, None], b1.shape)
    np.testing.assert_array_equal(b1[keep], np.asarray(bias)[keep])
    assert np.all(b1[~keep] == 0)


@pytest.mark.parametrize("scheme", [Alibi(), Sandwich()], ids=repr)
def test_constant_schemes_have_no_params(scheme):
    """ALiBi's slopes and Sandwich's scales follow from the bound dims: no parameters, so no
    optimizer state and nothing weight decay could touch; the head count comes from dims."""
    assert make_params(scheme, DIMS12) == {}
    q_pos = positions(1, 6)
    assert scheme.bind(DIMS12).bias({}, q_pos, q_pos).shape == (1, 12, 6, 6)
    assert scheme.bind(DIMS).bias({}, q_pos, q_pos).shape == (1, 4, 6, 6)
    with pytest.raises(ValueError, match="not bound"):
        scheme.bias({}, q_pos, q_pos)


def test_alibi_bad_symmetric():
    with pytest.raises(ConfigError, match="position.symmetric"):
        registry.make({"name": "alibi", "symmetric": "yes"})


# -- properties shared by the three schemes ---------------------------------------------

SCHEMES = [
    Alibi(),
    Alibi(symmetric=False),
    Kerple(variant="log"),
    Kerple(variant="power"),
    Sandwich(),
]


@pytest.mark.parametrize("scheme", SCHEMES, ids=repr)
def test_translation_invariance(scheme):
    scheme = scheme.bind(DIMS)
    params = make_params(scheme)
    q_pos, k_pos = positions(2, 6, seed=3), positions(2, 9, seed=4)
    base = scheme.bias(params, q_pos, k_pos)
    shifted = scheme.bias(params, q_pos + 1000, k_pos + 1000)
    np.testing.assert_allclose(shifted, base, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", SCHEMES, ids=repr)
def test_tiles_equal_whole(scheme):
    scheme = scheme.bind(DIMS)
    params = make_params(scheme)
    pos = positions(2, 12, seed=5)
    whole = np.asarray(scheme.bias(params, pos, pos))
    rows = []
    for qs in (slice(0, 4), slice(4, 8), slice(8, 12)):
        cols = [scheme.bias(params, pos[:, qs], pos[:, ks]) for ks in (slice(0, 5), slice(5, 12))]
        rows.append(np.concatenate(cols, axis=-1))
    np.testing.assert_array_equal(np.concatenate(rows, axis=-2), whole)


@pytest.mark.parametrize("name", ["alibi", "kerple", "sandwich"])
def test_registry_builds_bias_only_schemes(name):
    scheme = registry.make(name).bind(DIMS)
    assert scheme.hooks == ("bias",)
    params = make_params(scheme)
    pos = positions(3, 4)
    bias = scheme.bias(params, pos, pos)
    assert bias.shape == (3, DIMS.num_heads, 4, 4) and bias.dtype == jnp.float32
    # Every scheme here is 0 on the diagonal and never rewards distance.
    np.testing.assert_allclose(np.diagonal(bias, axis1=2, axis2=3), 0.0, atol=1e-6)
    assert np.all(np.asarray(bias) <= 1e-6)
    # Static config is hashable, so the hook jit-compiles with the scheme closed over.
    np.testing.assert_allclose(jax.jit(scheme.bias)(params, pos, pos), bias, rtol=1e-6)


def test_positions_must_be_2d():
    with pytest.raises(ConfigError, match="q_pos"):
        abs_distance(jnp.arange(4), jnp.arange(4)[None])


# -- KERPLE -----------------------------------------------------------------------------


def np_kerple(r1, r2, q_pos, k_pos, variant, eps=1e-2):
    d = np.abs(np_rel(q_pos, k_pos))[:, None]
    r1 = np.maximum(np.asarray(r1, np.float64), eps)[None, :, None, None]
    r2 = np.asarray(r2, np.float64)
    if variant == "log":
        return -r1 * np.log(1 + np.maximum(r2, eps)[None, :, None, None] * d)
    return -r1 * d ** np.clip(r2, eps, 2)[None, :, None, None]


@pytest.mark.parametrize("variant", ["log", "power"])
def test_kerple_matches_reference_formula(variant):
    scheme = Kerple(variant=variant)
    params = make_params(scheme, seed=7)
    q_pos, k_pos = positions(2, 5, seed=8), positions(2, 6, seed=9)
    expected = np_kerple(params["r1"], params["r2"], q_pos, k_pos, variant)
    np.testing.assert_allclose(scheme.bias(params, q_pos, k_pos), expected, rtol=1e-5, atol=1e-6)


def test_kerple_init_ranges():
    # Reference: bias_p ~ U(0, 2), bias_a ~ U(0, 1), per head.
    log = make_params(Kerple(variant="log"), DIMS12)
    power = make_params(Kerple(variant="power"), DIMS12)
    assert log["r1"].shape == log["r2"].shape == (12,)
    assert 1.0 < float(log["r1"].max()) < 2.0 and float(log["r2"].max()) < 1.0
    assert float(power["r1"].max()) < 1.0 and 1.0 < float(power["r2"].max()) < 2.0


@pytest.mark.parametrize("variant", ["log", "power"])
def test_kerple_positivity_by_clamping(variant):
    q_pos = positions(1, 6, seed=10)
    r1 = jnp.array([-1.0, 0.0, 0.5, 3.0])
    r2 = jnp.array([-0.5, 0.001, 1.5, 5.0])
    bias = kerple_bias(r1, r2, q_pos, q_pos, variant)
    clamped = kerple_bias(
        jnp.maximum(r1, 1e-2),
        jnp.clip(r2, 1e-2, 2.0 if variant == "power" else None),
        q_pos, q_pos, variant,
    )
    np.testing.assert_allclose(bias, clamped, rtol=1e-6)
    assert np.all(np.asarray(bias) <= 0)
    # Straight-through: a parameter held at the bound still receives a gradient.
    grads = jax.grad(lambda a, b: kerple_bias(a, b, q_pos, q_pos, variant).sum(), (0, 1))(r1, r2)
    for g in grads:
        assert np.all(np.isfinite(g)) and np.all(np.asarray(g) != 0)


@pytest.mark.parametrize("variant", ["log", "power"])
def test_kerple_gradients(variant):
    q_pos, k_pos = positions(1, 4, seed=11), positions(1, 5, seed=12)
    r1 = jnp.array([0.3, 1.2, 0.7, 1.9])
    r2 = jnp.array([0.4, 0.9, 1.3, 0.2])  # inside the clamp bounds, distance 0 included

    def f(a, b):
        return kerple_bias(a, b, q_pos, k_pos, variant)

    check_grads(f, (r1, r2), order=1, modes=["rev"], eps=1e-3, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize(
    "config, field",
    [
        ({"name": "kerple", "variant": "cubic"}, "position.variant"),
        ({"name": "kerple", "eps": 0.0}, "position.eps"),
        ({"name": "kerple", "slopes": 2}, "position.slopes"),
    ],
)
def test_kerple_bad_config(config, field):
    with pytest.raises(ConfigError, match=field):
        registry.make(config)


def test_bad_heads_in_dims():
    dims = dataclasses.replace(DIMS, num_heads=0)
    for scheme in (Alibi(), Kerple(), Sandwich()):
        with pytest.raises(ConfigError, match="model.num_heads"):
            scheme.check(dims, 16)
        with pytest.raises(ConfigError, match="model.num_heads"):
            scheme.bind(dims).init_layer(jax.random.PRNGKey(0))


# -- Sandwich ---------------------------------------------------------------------------


def np_sandwich(num_heads, dim, q_pos, k_pos):
    """NeMo SandwichRelativePositionEmbedding.forward, in float64 numpy."""
    rel = np.abs(np_rel(q_pos, k_pos))
    inv_freq = 1.0 / 10000 ** (2 * np.arange(1, dim / 2 + 1) / dim)
    bias = np.cos(rel[..., None] * inv_freq).sum(-1)  # [B, Lq, Lk]
    scales = np.arange(1, num_heads + 1)[None, :, None, None] * 8 / num_heads
    return (bias[:, None] - dim / 2) / scales


def test_sandwich_matches_nemo_formula():
    q_pos, k_pos = positions(2, 6, seed=13, high=400), positions(2, 8, seed=14, high=400)
    scheme = Sandwich()
    bias = scheme.bind(DIMS12).bias(make_params(scheme, DIMS12), q_pos, k_pos)
    np.testing.assert_allclose(bias, np_sandwich(12, 8, q_pos, k_pos), rtol=1e-5, atol=1e-5)
    # `dim` overrides head_dim.
    wide = Sandwich(dim=32)
    bias = wide.bind(DIMS12).bias(make_params(wide, DIMS12), q_pos, k_pos)
    np.testing.assert_allclose(bias, np_sandwich(12, 32, q_pos, k_pos), rtol=1e-5, atol=1e-5)


def test_sandwich_function_direct():
    pos = jnp.arange(5, dtype=jnp.int32)[None]
    np.testing.assert_allclose(
        sandwich_bias(4, 16, pos, pos), np_sandwich(4, 16, pos, pos), rtol=1e-5, atol=1e-6
    )


def test_sandwich_bad_dim():
    with pytest.raises(ConfigError, match="position.dim"):
        registry.make({"name": "sandwich", "dim": 7})
    with pytest.raises(ConfigError, match="model.head_dim"):
        Sandwich().check(dataclasses.replace(DIMS, head_dim=9), 16)
