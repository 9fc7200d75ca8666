"""FIRE bias hook: the reference formula in numpy, its defined dependence on |i - j| and
max(L, i), tile-wise evaluation and gradients of every learned parameter."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from posjax.errors import ConfigError
from posjax.positions import registry
from posjax.positions.base import Dims
from posjax.positions.fire import Fire, fire_bias

DIMS = Dims(num_heads=3, head_dim=8, hidden=24, max_length=64)


def small_fire(**kw):
    # A narrow MLP and a short threshold keep the tests tiny and let positions cross L.
    fields = dict(mlp_width=6, init_L=16.0)
    fields.update(kw)
    return Fire(**fields)


def np_fire(params, q_pos, k_pos, init_L, eps=1e-6):
    """The paper's appendix code (FIRE.forward), in float64 numpy, with explicit positions."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    q, k = np.asarray(q_pos, np.float64), np.asarray(k_pos, np.float64)
    rel = q[:, :, None] - k[:, None, :]
    threshold = abs(p["L_multiplier"] * init_L)
    normalizer = np.maximum(q, threshold)[:, :, None]
    rel = np.log(np.abs(p["c"] * rel) + 1)
    normalizer = np.log(np.abs(p["c"] * normalizer) + 1) + eps
    x = (rel / normalizer)[..., None]  # [B, Lq, Lk, 1]
    hidden = np.maximum(x * p["w1"] + p["b1"], 0)  # [B, Lq, Lk, M]
    out = hidden @ p["w2"] + p["b2"]  # [B, Lq, Lk, H]
    return out.transpose(0, 3, 1, 2)


def params_for(scheme, seed=0):
    scheme = scheme.bind(DIMS)
    params = scheme.init_layer(jax.random.PRNGKey(seed))
    # Move c and L off their init values so the test exercises them as variables.
    return dict(params, c=jnp.float32(0.3), L_multiplier=jnp.float32(1.25))


def test_matches_reference_formula():
    scheme = small_fire()
    params = params_for(scheme)
    q_pos = jnp.array([[0, 3, 9, 40], [5, 17, 18, 70]], jnp.int32)  # some past L = 20
    k_pos = jnp.array([[0, 1, 2, 3, 30], [4, 5, 60, 61, 90]], jnp.int32)
    bias = jax.jit(scheme.bias)(params, q_pos, k_pos)
    assert bias.shape == (2, 3, 4, 5) and bias.dtype == jnp.float32
    np.testing.assert_allclose(bias, np_fire(params, q_pos, k_pos, 16.0), rtol=1e-5, atol=1e-6)


def test_init_shapes_and_values():
    params = Fire().bind(DIMS).init_layer(jax.random.PRNGKey(1))
    shapes = {k: v.shape for k, v in params.items()}
    assert shapes == {"w1": (32,), "b1": (32,), "w2": (32, 3), "b2": (3,), "c": (), "L_multiplier": ()}
    assert float(params["c"]) == pytest.approx(0.1) and float(params["L_multiplier"]) == 1.0
    assert float(jnp.abs(params["w2"]).max()) <= 1 / np.sqrt(32)


def test_dependence_on_distance_and_threshold():
    scheme = small_fire()
    params = params_for(scheme)  # threshold L = 1.25 * 16 = 20
    bias = jax.jit(scheme.bias)  # one compile per shape instead of one per op and shape
    q_pos = jnp.array([[2, 5, 9]], jnp.int32)
    k_pos = jnp.array([[0, 4, 6, 11]], jnp.int32)
    base = bias(params, q_pos, k_pos)
    # While every query position stays below L the normalizer is L: translation invariant.
    np.testing.assert_allclose(bias(params, q_pos + 8, k_pos + 8), base, rtol=1e-6)
    # Symmetric in i - j for a fixed query position.
    query = jnp.array([[9]], jnp.int32)
    offsets = jnp.array([[1, 2, 7]], jnp.int32)
    before = bias(params, query, query - offsets)
    after = bias(params, query, query + offsets)
    np.testing.assert_allclose(before, after, rtol=1e-6)
    # Past L the normalizer grows with the query position: same distances, different bias.
    far = bias(params, q_pos + 100, k_pos + 100)
    assert not np.allclose(far, base, atol=1e-4)
    # ... and it is exactly the bias of the distance squeezed by psi(i) instead of psi(L).
    np.testing.assert_allclose(far, np_fire(params, q_pos + 100, k_pos + 100, 16.0), rtol=1e-5, atol=1e-6)


def test_tiles_equal_whole():
    scheme = small_fire()
    params = params_for(scheme)
    bias = jax.jit(scheme.bias)
    pos = jnp.array([[0, 2, 3, 7, 11, 19, 20, 25, 33]], jnp.int32)
    whole = np.asarray(bias(params, pos, pos))
    rows = []
    for qs in (slice(0, 4), slice(4, 8)):  # equal tile shapes: two compiles in all
        cols = [bias(params, pos[:, qs], pos[:, ks]) for ks in (slice(0, 4), slice(4, 8))]
        rows.append(np.concatenate(cols, axis=-1))
    np.testing.assert_allclose(np.concatenate(rows, axis=-2), whole[..., :8, :8], rtol=1e-6)


def test_gradients_reach_every_parameter():
    scheme = small_fire()
    params = params_for(scheme)
    # Positions away from ties of max(i, L) (i = 20) and from ReLU kinks at these values.
    q_pos = jnp.array([[1, 6, 30]], jnp.int32)
    k_pos = jnp.array([[0, 3, 8, 27]], jnp.int32)

    @jax.jit
    def f(p):
        return scheme.bias(p, q_pos, k_pos)

    check_grads(f, (params,), order=1, modes=["rev"], eps=1e-3, atol=2e-2, rtol=2e-2)
    grads = jax.grad(lambda p: jnp.sum(f(p) ** 2))(params)
    for name, g in grads.items():
        assert np.all(np.isfinite(g)), name
        assert float(jnp.abs(g).max()) > 0, name


def test_jit_and_registry():
    scheme = registry.make({"name": "fire", "mlp_width": 4})
    assert isinstance(scheme, Fire) and scheme.hooks == ("bias",)
    scheme = scheme.bind(DIMS)
    params = scheme.init_layer(jax.random.PRNGKey(2))
    pos = jnp.arange(6, dtype=jnp.int32)[None]
    np.testing.assert_allclose(
        jax.jit(scheme.bias)(params, pos, pos), fire_bias(params, pos, pos), rtol=1e-6
    )
    assert registry.scheme_class("fire") is Fire


@pytest.mark.parametrize(
    "field, value",
    [("mlp_width", 0), ("mlp_width", 2.5), ("init_c", -0.1), ("init_L", 0.0), ("eps", -1.0)],
)
def test_bad_config(field, value):
    with pytest.raises(ConfigError, match=f"position.{field}"):
        registry.make({"name": "fire", field: value})


def test_bad_heads():
    with pytest.raises(ConfigError, match="model.num_heads"):
        Fire().bind(Dims(num_heads=-2, head_dim=8, hidden=8, max_length=8))
