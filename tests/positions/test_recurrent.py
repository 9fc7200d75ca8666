"""Tests for posjax/positions/recurrent.py (FLOATER: ODE-generated absolute positions)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from posjax.errors import ConfigError
from posjax.positions import make
from posjax.positions.absolute import sinusoidal_embedding
from posjax.positions.base import Dims
from posjax.positions.recurrent import Floater, floater_solve

DIMS = Dims(num_heads=1, head_dim=4, hidden=4, max_length=8)


def _random_params(seed=0, e=4, m=6, dtype=jnp.float32):
    """Non-trivial dynamics (init has h == 0, which would make every test pass trivially)."""
    ks = jax.random.split(jax.random.key(seed), 6)
    n = lambda k, shape, s: (s * jax.random.normal(k, shape)).astype(dtype)  # noqa: E731
    return {
        "q0": n(ks[0], (e,), 0.5),
        "w1": n(ks[1], (e, m), 0.7),
        "wt": n(ks[2], (m,), 1.0),
        "b1": n(ks[3], (m,), 0.3),
        "w2": n(ks[4], (m, e), 0.5),
        "b2": n(ks[5], (e,), 0.2),
    }


def _euler_reference(params, times, dt):
    """q(t) at each of the sorted `times` by explicit Euler with step <= dt from 0, float64
    numpy: the ODE definition, integrated once along the time axis."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    q, t, out = p["q0"].copy(), 0.0, []
    for t_end in times:
        n = int(np.ceil((t_end - t) / dt))
        h = (t_end - t) / n if n else 0.0
        for _ in range(n):
            q = q + h * (np.tanh(q @ p["w1"] + t * p["wt"] + p["b1"]) @ p["w2"] + p["b2"])
            t += h
        out.append(q.copy())
    return np.stack(out)


def test_init_is_exactly_sinusoidal_and_shapes():
    scheme = make("floater")
    params = scheme.bind(Dims(2, 4, 8, 16)).init_embed(jax.random.key(0))
    assert {k: v.shape for k, v in params.items()} == {
        "q0": (8,),
        "w1": (8, 8),
        "wt": (8,),
        "b1": (8,),
        "w2": (8, 8),
        "b2": (8,),
    }
    assert all(v.dtype == jnp.float32 for v in params.values())
    x = jax.random.normal(jax.random.key(1), (2, 5, 8))
    pos = jnp.array([[0, 1, 2, 3, 4], [9, 10, 11, 12, 5000]])
    out = scheme.embed(params, x, pos, None)
    assert out.shape == x.shape
    np.testing.assert_allclose(out, x + sinusoidal_embedding(pos, 8), atol=1e-6)
    assert make("floater", mlp_dim=3).bind(DIMS).init_embed(jax.random.key(0))["w1"].shape == (4, 3)


def test_matches_high_accuracy_reference():
    params = _random_params()
    delta = 0.05
    pos = np.array([0, 1, 7, 20, 40])
    got = np.asarray(floater_solve(params, jnp.asarray(pos) * delta, steps=16))
    assert got.shape == (5, 4)
    want = _euler_reference(params, pos * delta, dt=1e-4)  # Euler error ~1e-4
    np.testing.assert_allclose(got, want, atol=1e-3, rtol=1e-3)
    # the scheme's vectors are the same solve (sinusoidal off)
    scheme = make("floater", delta=delta, steps=16, sinusoidal=False)
    np.testing.assert_allclose(scheme.vectors(params, jnp.asarray(pos)), got, atol=1e-6)


def test_positions_far_past_training_length():
    params = _random_params(1)
    scheme = make("floater", sinusoidal=False)  # delta 0.01, 16 steps
    pos = jnp.array([[0, 511, 4096, 100_000]])
    out = scheme.embed(params, jnp.zeros((1, 4, 4)), pos, None)
    assert np.isfinite(out).all()
    # bounded h: |q(t) - q0| <= t * (||W2||_1-row bound * 1 + |b2|) -- never blows up
    bound = (
        100_000
        * 0.01
        * (np.abs(np.asarray(params["w2"])).sum(0) + np.abs(np.asarray(params["b2"])))
    )
    assert (np.abs(np.asarray(out[0, 3]) - np.asarray(params["q0"])) <= bound + 1e-3).all()
    # with enough steps the solve is accurate there too (t = 40.96 at position 4096)
    fine = np.asarray(floater_solve(params, jnp.array([40.96]), steps=400))[0]
    np.testing.assert_allclose(fine, _euler_reference(params, [40.96], dt=1e-3)[0], atol=2e-2)


def test_fast_grid_path_equals_direct_solve():
    params = _random_params(2)
    scheme = make("floater", delta=0.1, steps=8)
    x = jnp.zeros((2, 6, 4))
    inside = jnp.array([[0, 1, 2, 3, 4, 5], [0, 1, 2, 0, 1, 2]])  # all < L = 6: grid path
    outside = inside.at[1, 5].set(50)  # one position past L: direct path
    embed = jax.jit(scheme.embed)
    direct = scheme.vectors(params, inside)  # grid_length=0: always the direct path
    np.testing.assert_allclose(embed(params, x, inside, None), direct, atol=1e-6)
    got = embed(params, x, outside, None)
    np.testing.assert_allclose(got, scheme.vectors(params, outside), atol=1e-6)
    np.testing.assert_allclose(got[0], direct[0], atol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_dtype(dtype):
    scheme = make("floater")
    params = _random_params(3)
    x = jax.random.normal(jax.random.key(4), (1, 3, 4)).astype(dtype)
    pos = jnp.array([[0, 257, 258]])
    out = scheme.embed(params, x, pos, None)
    assert out.dtype == dtype and np.isfinite(np.asarray(out, np.float32)).all()
    ref = scheme.embed(params, x.astype(jnp.float32), pos, None)
    np.testing.assert_allclose(np.asarray(out, np.float32), ref, atol=5e-2, rtol=2e-2)


@pytest.mark.slow
def test_gradients_wrt_mlp_params():
    with jax.enable_x64(True):
        params = _random_params(5, e=2, m=3, dtype=jnp.float64)
        t = jnp.array([0.0, 0.3, 1.1], jnp.float64)
        w = jax.random.normal(jax.random.key(6), (3, 2), jnp.float64)

        @jax.jit  # check_grads calls it many times: compile once
        def loss(params):
            return jnp.sum(floater_solve(params, t, steps=4) * w)

        check_grads(loss, (params,), order=1, modes=("rev",))
        grads = jax.grad(loss)(params)
        assert all(np.abs(np.asarray(g)).sum() > 0 for g in jax.tree.leaves(grads))
        # and through the scheme's embed (fast grid path inside a cond)
        scheme = Floater(delta=0.2, steps=4, sinusoidal=True)
        x = jnp.zeros((1, 3, 2), jnp.float64)
        pos = jnp.array([[0, 2, 1]])
        embed_loss = jax.jit(lambda p: jnp.sum(scheme.embed(p, x, pos, None) * w))
        check_grads(embed_loss, (params,), order=1, modes=("rev",))


@pytest.mark.parametrize(
    "field, value",
    [
        ("delta", 0),
        ("delta", -0.1),
        ("steps", 0),
        ("steps", 2.0),
        ("mlp_dim", 0),
        ("sinusoidal", "yes"),
    ],
)
def test_bad_fields(field, value):
    with pytest.raises(ConfigError, match=f"position.{field}"):
        make({"name": "floater", field: value})


def test_odd_width():
    with pytest.raises(ConfigError, match="model.hidden=5.*sinusoidal"):
        make("floater").bind(Dims(1, 5, 5, 8)).init_embed(jax.random.key(0))
    scheme = make("floater", sinusoidal=False)
    params = scheme.bind(Dims(1, 5, 5, 8)).init_embed(jax.random.key(0))
    out = scheme.embed(params, jnp.zeros((1, 2, 5)), jnp.array([[0, 1]]), None)
    assert out.shape == (1, 2, 5) and np.isfinite(out).all()
    scheme.check(Dims(1, 5, 5, 8), 10**7)  # any length
