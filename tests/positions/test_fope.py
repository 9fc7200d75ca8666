"""FoPE (`fope`): attention against the paper's equations written out (each turned pair a
Fourier series over the RoPE frequencies at or above 2 pi / T; values and gradients, the
coefficients included, on the reference, chunked and rows paths), the frequency floor, the
start at RoPE (relative logits), the position-free pairs, the pinned training length, the
one-line errors and the listing."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import positions
from posjax.__main__ import listing
from posjax.attention import attend
from posjax.errors import ConfigError
from posjax.positions.base import Dims
from posjax.positions.rotary import rotate_by_angles

B, L, H, D = 2, 9, 2, 16
T = 64
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=T)
TOL = dict(rtol=2e-5, atol=2e-5)
PATHS = ("reference", "chunked", "rows")


def kept_frequencies(trained_length):
    """theta_i = 10000**(-2i/D); those below the floor 2 pi / T are clipped to zero and
    dropped from the basis."""
    theta = [10000.0 ** (-2 * i / D) for i in range(D // 2)]
    return np.array([t for t in theta if t >= 2 * math.pi / trained_length])


def direct(q, k, v, pos, cos_coef, sin_coef, omega):
    """Pair j < P (dims j, j + D/2): (x_j, x_j') -> (x_j C - x_j' S, x_j' C + x_j S) with
    C_hj(p) = sum_m cos(p w_m) a_hmj, S_hj(p) = sum_m sin(p w_m) b_hmj; pairs >= P as they
    are; then softmax(q'.k' / sqrt(D)) v."""
    P = cos_coef.shape[-1]
    ang = pos.astype(jnp.float32)[..., None] * jnp.asarray(omega, jnp.float32)  # [B, L, M]
    C = jnp.einsum("blm,hmp->blhp", jnp.cos(ang), cos_coef)
    S = jnp.einsum("blm,hmp->blhp", jnp.sin(ang), sin_coef)

    def turn(x):
        out = x
        for j in range(P):
            a, b = x[..., j], x[..., D // 2 + j]
            c, s = C[..., j], S[..., j]
            out = out.at[..., j].set(a * c - b * s).at[..., D // 2 + j].set(b * c + a * s)
        return out

    logits = jnp.einsum("bihd,bjhd->bhij", turn(q), turn(k)) / np.sqrt(D)
    return jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits, -1), v)


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    q, k, v, ct = (jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))
    pos = jnp.asarray(np.sort(rng.choice(3 * T, (B, L), replace=False), axis=1), jnp.int32)
    return q, k, v, ct, pos


def test_the_floor_the_series_width_and_the_start():
    scheme = positions.make("fope").bind(DIMS)
    assert scheme.trained_length == T
    omega = kept_frequencies(T)
    assert len(omega) == 3  # 1, 0.316, 0.1 >= 2 pi / 64 = 0.098 > 0.0316
    np.testing.assert_allclose(scheme.frequencies(), omega, rtol=1e-12)
    assert scheme.series_pairs() == 3  # min(M, D/4 = 4)
    short = positions.make("fope", trained_length=20).bind(DIMS)
    assert len(short.frequencies()) == 2 and short.series_pairs() == 2
    flat = positions.make("fope", init_gain=0.0).bind(DIMS)
    for coef in flat.coefficients(flat.init_layer(jax.random.key(0))):  # identity per head
        np.testing.assert_array_equal(coef, np.broadcast_to(np.eye(3), (H, 3, 3)))
    noisy = scheme.init_layer(jax.random.key(0))  # offsets from it, 0.3 * xavier std
    assert noisy["cos_delta"].shape == (H, 3, 3)
    assert not np.allclose(noisy["cos_delta"], noisy["sin_delta"])
    np.testing.assert_allclose(np.std(np.asarray(noisy["cos_delta"])),
                               0.3 * math.sqrt(2 / (3 * 3 + H * 3)), rtol=0.5)
    # an uneven selection: M = 8 kept frequencies, P = D/4 = 2 pairs read every 4th
    wide = positions.make("fope", init_gain=0.0, trained_length=10**9).bind(
        dataclasses.replace(DIMS, head_dim=8, hidden=16))
    eye = np.asarray(wide.coefficients(wide.init_layer(jax.random.key(0)))[0][0])
    assert eye.shape == (4, 2) and eye[0, 0] == 1 and eye[2, 1] == 1 and eye.sum() == 2


@pytest.mark.slow
def test_matches_the_papers_equations_values_and_grads_on_every_path():
    q, k, v, ct, pos = _inputs()
    scheme = positions.make("fope", init_gain=0.5).bind(DIMS)
    params = scheme.init_layer(jax.random.key(3))
    omega = kept_frequencies(T)

    def ours(impl):
        return lambda q, k, v, p: attend(q, k, v, scheme=scheme, params=p, q_pos=pos,
                                         k_pos=pos, implementation=impl, block_q=4, block_k=4)

    def mine(q, k, v, p):
        eye = np.eye(len(omega))  # M = P = 3: the identity plus the learned offsets
        return direct(q, k, v, pos, eye + p["cos_delta"], eye + p["sin_delta"], omega)

    def both(f):
        return jax.jit(lambda: (f(q, k, v, params), jax.grad(
            lambda *a: (f(*a) * ct).sum(), (0, 1, 2, 3))(q, k, v, params)))()

    want, want_grads = both(mine)
    for impl in PATHS:
        got, grads = both(ours(impl))
        np.testing.assert_allclose(got, want, err_msg=impl, **TOL)
        for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
            np.testing.assert_allclose(a, b, err_msg=impl, **TOL)
    assert np.abs(np.asarray(want_grads[3]["sin_delta"])).min() > 0  # the series learn


def _logits(scheme, params, q, k, q_pos, k_pos):
    qr, kr = scheme.rotate(params, q, k, q_pos, k_pos)
    return jnp.einsum("bihd,bjhd->bhij", qr, kr)


def test_starts_as_rope_on_the_kept_frequencies_and_the_rest_see_no_position():
    q, k, _, _, pos = _inputs(1)
    scheme = positions.make("fope", init_gain=0.0).bind(DIMS)
    params = scheme.init_layer(jax.random.key(0))
    # RoPE (half-split) with frequencies w_0..w_2 on pairs 0..2 and 0 on the rest
    freqs = np.zeros(D // 2)
    freqs[:3] = kept_frequencies(T)
    angles = pos.astype(jnp.float32)[..., None, None] * jnp.asarray(freqs, jnp.float32)
    want = jnp.einsum("bihd,bjhd->bhij", rotate_by_angles(q, angles, interleaved=False),
                      rotate_by_angles(k, angles, interleaved=False))
    got = _logits(scheme, params, q, k, pos, pos)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_logits(scheme, params, q, k, pos + 50, pos + 50), got,
                               rtol=1e-4, atol=1e-4)
    # with coefficients of any value, the pairs past P carry no position
    noisy = positions.make("fope").bind(DIMS)
    nparams = noisy.init_layer(jax.random.key(1))
    free = np.zeros(D, bool)
    free[3:D // 2] = free[D // 2 + 3:] = True
    qf, kf = q * free, k * free
    base = _logits(noisy, nparams, qf, kf, pos, pos)
    np.testing.assert_allclose(base, jnp.einsum("bihd,bjhd->bhij", qf, kf), rtol=1e-6)
    np.testing.assert_allclose(_logits(noisy, nparams, qf, kf, pos, pos + 999), base,
                               rtol=1e-6)
    assert np.abs(np.asarray(_logits(noisy, nparams, q, k, pos, pos + 1)
                             - _logits(noisy, nparams, q, k, pos, pos))).max() > 1e-2


def test_a_longer_model_keeps_the_floor_errors_and_listing():
    scheme = positions.make("fope").bind(DIMS)
    ext = scheme.extend("as_is", 8 * T)
    assert ext.fields == {"trained_length": T}
    longer = positions.make({"name": "fope", **ext.fields}).bind(
        dataclasses.replace(DIMS, max_length=8 * T))
    np.testing.assert_array_equal(longer.frequencies(), scheme.frequencies())
    for field, value in (("trained_length", 6), ("trained_length", 1.5), ("init_gain", -1),
                         ("init_gain", True), ("base", 1), ("interleaved", "no")):
        with pytest.raises(ConfigError, match=f"position.{field}") as err:
            positions.make("fope", **{field: value})
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="model.head_dim"):
        positions.make("fope").bind(dataclasses.replace(DIMS, head_dim=2, hidden=4))
    with pytest.raises(ConfigError, match="position.trained_length"):
        positions.make("fope").bind(dataclasses.replace(DIMS, max_length=5))
    assert "fope  (hooks: rotate)" in listing("schemes")
    assert "trained_length=None, init_gain=0.3, interleaved=False" in listing("schemes")
