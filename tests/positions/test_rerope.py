"""Tests of posjax/positions/rerope.py: ReRoPE and leaky ReRoPE through the scores hook."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from posjax.errors import ConfigError
from posjax.positions import registry
from posjax.positions.base import Dims
from posjax.positions.rerope import LeakyReRope, ReRope
from posjax.positions.rotary import apply_rope

B, L, H, D = 2, 12, 2, 8


def _rand(shape, seed):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


def _rope_logits(q, k, qp, kp):
    return jnp.einsum("bqhd,bkhd->bhqk", apply_rope(q, qp), apply_rope(k, kp))


def _np_rotate(x, angle_pos, base=10000.0):
    """Interleaved rotation of one vector x [D] by a (fractional) position, float64."""
    out = np.array(x, np.float64)
    for i in range(len(x) // 2):
        ang = angle_pos * base ** (-2.0 * i / len(x))
        a, b = x[2 * i], x[2 * i + 1]
        out[2 * i] = a * np.cos(ang) - b * np.sin(ang)
        out[2 * i + 1] = b * np.cos(ang) + a * np.sin(ang)
    return out


def naive_scores(q, k, qp, kp, window, leaky=None):
    """Per (i, j): r = squashed i - j; logit = R(r) q . k (a rotation by r alone), float64."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    out = np.zeros((q.shape[0], q.shape[2], q.shape[1], k.shape[1]))
    for b in range(q.shape[0]):
        for i in range(q.shape[1]):
            for j in range(k.shape[1]):
                r = float(qp[b, i] - kp[b, j])
                if abs(r) >= window:
                    far = window if leaky is None else window + (abs(r) - window) / leaky
                    r = np.sign(r) * far
                for h in range(q.shape[2]):
                    out[b, h, i, j] = _np_rotate(q[b, i, h], r) @ k[b, j, h]
    return out


@pytest.fixture(scope="module")
def qk():
    pos = jnp.broadcast_to(jnp.arange(L), (B, L)).astype(jnp.int32)
    return _rand((B, L, H, D), 0), _rand((B, L, H, D), 1), pos


def test_rerope_is_rope_inside_window(qk):
    q, k, pos = qk
    got = ReRope(window=L).scores({}, q, k, pos, pos)
    np.testing.assert_allclose(got, _rope_logits(q, k, pos, pos), rtol=1e-5, atol=1e-5)
    assert got.dtype == jnp.float32 and got.shape == (B, H, L, L)


def test_rerope_clamps_beyond_window(qk):
    q, k, pos = qk
    w = 3
    got = np.asarray(ReRope(window=w).scores({}, q, k, pos, pos))
    rope = np.asarray(_rope_logits(q, k, pos, pos))
    # the RoPE logit of the same q_i, k_j placed at distance +w (query after) or -w
    w_pos, z_pos = jnp.full((B, L), w, jnp.int32), jnp.zeros((B, L), jnp.int32)
    at_plus_w = np.asarray(_rope_logits(q, k, w_pos, z_pos))
    at_minus_w = np.asarray(_rope_logits(q, k, z_pos, w_pos))
    rel = np.arange(L)[:, None] - np.arange(L)[None, :]
    want = np.where(rel >= w, at_plus_w, np.where(rel <= -w, at_minus_w, rope))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, naive_scores(q, k, pos, pos, w), rtol=1e-4, atol=1e-4)


def test_leaky_matches_naive_fractional_positions(qk):
    q, k, pos = qk
    s = registry.make({"name": "leaky_rerope", "window": 3, "leaky_factor": 4.0})
    assert isinstance(s, LeakyReRope) and s.hooks == ("scores",)
    got = s.scores({}, q, k, pos, pos)
    want = naive_scores(q, k, pos, pos, 3, leaky=4.0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # with a huge leaky factor the far region freezes at w: ReRoPE
    np.testing.assert_allclose(
        LeakyReRope(window=3, leaky_factor=1e6).scores({}, q, k, pos, pos),
        ReRope(window=3).scores({}, q, k, pos, pos),
        rtol=1e-3,
        atol=1e-3,
    )


@pytest.mark.parametrize("scheme", [ReRope(window=4), LeakyReRope(window=2, leaky_factor=3.0)])
def test_tiles_concatenated_equal_whole(qk, scheme):
    q, k, _ = qk
    # shuffled, offset positions (packing / randomized positions)
    qp = jnp.asarray(np.random.default_rng(0).permutation(L)[None].repeat(B, 0) + 40, jnp.int32)
    kp = jnp.asarray(np.random.default_rng(1).permutation(L)[None].repeat(B, 0) + 37, jnp.int32)
    whole = scheme.scores({}, q, k, qp, kp)
    rows = []
    for a, b in ((0, 5), (5, L)):
        cols = [
            scheme.scores({}, q[:, a:b], k[:, c:d], qp[:, a:b], kp[:, c:d])
            for c, d in ((0, 4), (4, 8), (8, L))
        ]
        rows.append(jnp.concatenate(cols, axis=-1))
    np.testing.assert_allclose(jnp.concatenate(rows, axis=-2), whole, rtol=1e-5, atol=1e-5)


def test_bf16_inputs():
    q, k = _rand((1, 6, 1, D), 2), _rand((1, 6, 1, D), 3)
    pos = jnp.arange(250, 256)[None]
    s = LeakyReRope(window=2, leaky_factor=4.0)
    ref = s.scores({}, q, k, pos, pos)
    got = s.scores({}, q.astype(jnp.bfloat16), k.astype(jnp.bfloat16), pos, pos)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, ref, atol=0.1, rtol=0.05)


def test_bad_config():
    for bad in ({"window": 0}, {"window": -3}, {"window": 2.5}):
        with pytest.raises(ConfigError, match="position.window"):
            registry.make({"name": "rerope", **bad})
    with pytest.raises(ConfigError, match="position.leaky_factor"):
        LeakyReRope(leaky_factor=1.0)
    with pytest.raises(ConfigError, match="head_dim=5"):
        ReRope().check(Dims(num_heads=2, head_dim=5, hidden=10, max_length=8), 8)
    ReRope().check(Dims(num_heads=2, head_dim=8, hidden=16, max_length=8), 8)


@pytest.mark.slow
def test_gradients():
    with jax.enable_x64(True):
        q = jax.random.normal(jax.random.key(4), (1, 5, 1, 4), jnp.float64)
        k = jax.random.normal(jax.random.key(5), (1, 5, 1, 4), jnp.float64)
        pos = jnp.arange(5)[None]
        for s in (ReRope(window=2), LeakyReRope(window=2, leaky_factor=3.0)):
            check_grads(lambda a, b: s.scores({}, a, b, pos, pos), (q, k), order=1)
