"""Cayley-STRING (`string`): attention against a direct definition with explicit rotation
matrices and P = (I - S)(I + S)^-1 written with a matrix inverse (values and gradients, the
learned basis and frequencies included, on the reference, chunked and rows paths), P
orthogonal, logits translation invariant in both axes for any basis, the start at rope2d,
the errors and the listing."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import positions
from posjax.__main__ import listing
from posjax.attention import attend
from posjax.errors import ConfigError
from posjax.positions.base import Dims

B, L, H, D = 2, 9, 2, 8
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)
TOL = dict(rtol=3e-5, atol=3e-5)
PATHS = ("reference", "chunked", "rows")


def axial(base):
    """Pair s < D/4 turns with the row at base**(-s/(D/4)), pair D/4 + s with the column."""
    w = np.array([base ** (-s / (D // 4)) for s in range(D // 4)])
    return np.concatenate([w, 0 * w]), np.concatenate([0 * w, w])


def rotation(angles):
    """[..., D/2] -> [..., D, D], interleaved pairs (2t, 2t + 1)."""
    out = jnp.zeros(angles.shape[:-1] + (D, D))
    for t in range(D // 2):
        c, s = jnp.cos(angles[..., t]), jnp.sin(angles[..., t])
        out = out.at[..., 2 * t, 2 * t].set(c).at[..., 2 * t, 2 * t + 1].set(-s)
        out = out.at[..., 2 * t + 1, 2 * t].set(s).at[..., 2 * t + 1, 2 * t + 1].set(c)
    return out


def basis(a):
    s = a - jnp.swapaxes(a, -1, -2)
    eye = jnp.eye(D)
    return (eye - s) @ jnp.linalg.inv(eye + s)


def direct(q, k, v, pos, a, f_row, f_col):
    """softmax((RoPE(r_i) P q_i) . (RoPE(r_j) P k_j) / sqrt(D)) v per head."""
    p = basis(a)  # [H, D, D]
    f_row, f_col = jnp.broadcast_to(f_row, (H, D // 2)), jnp.broadcast_to(f_col, (H, D // 2))
    r = pos.astype(jnp.float32)
    rot = rotation(r[..., 0, None, None] * f_row + r[..., 1, None, None] * f_col)  # B L H D D
    full = jnp.einsum("blhde,hef->blhdf", rot, p)
    qr = jnp.einsum("blhdf,blhf->blhd", full, q)
    kr = jnp.einsum("blhdf,blhf->blhd", full, k)
    logits = jnp.einsum("bihd,bjhd->bhij", qr, kr) / np.sqrt(D)
    return jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits, -1), v)


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    q, k, v, ct = (jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))
    pos = jnp.asarray(rng.randint(0, 9, (B, L, 2)), jnp.int32)
    a = jnp.asarray(rng.randn(H, D, D) * 0.3, jnp.float32)
    freqs = jnp.asarray(rng.uniform(-1.5, 1.5, (2, H, D // 2)), jnp.float32)
    return q, k, v, ct, pos, a, freqs


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["axial", "mixed"])
def test_matches_direct_definition_values_and_grads_on_every_path(mode):
    q, k, v, ct, pos, a, freqs = _inputs()
    scheme = positions.make("string", mode=mode).bind(DIMS)

    def params_of(a, fr):
        return {"cayley": a, **({"freqs": fr} if mode == "mixed" else {})}

    def mine(q, k, v, a, fr):
        f = (fr[0], fr[1]) if mode == "mixed" else tuple(map(jnp.asarray, axial(scheme.base)))
        return direct(q, k, v, pos, a, *f)

    def ours(impl):
        return lambda q, k, v, a, fr: attend(q, k, v, scheme=scheme, params=params_of(a, fr),
                                             q_pos=pos, k_pos=pos, implementation=impl,
                                             block_q=4, block_k=4)

    def both(f):
        return jax.jit(lambda: (f(q, k, v, a, freqs), jax.grad(
            lambda *x: (f(*x) * ct).sum(), (0, 1, 2, 3, 4))(q, k, v, a, freqs)))()

    want, want_grads = both(mine)
    for impl in PATHS:
        got, grads = both(ours(impl))
        np.testing.assert_allclose(got, want, err_msg=impl, **TOL)
        for name, x, y in zip(("dq", "dk", "dv", "da", "dfreqs"), grads, want_grads):
            np.testing.assert_allclose(x, y, err_msg=f"{impl} {name}", **TOL)
    assert np.abs(np.asarray(want_grads[3])).max() > 0  # the basis learns


def test_the_basis_is_orthogonal_and_logits_translation_invariant():
    q, k, _, _, pos, a, _ = _inputs(1)
    scheme = positions.make("string").bind(DIMS)
    params = {"cayley": a}
    p = np.asarray(scheme.basis(params))
    np.testing.assert_allclose(np.einsum("hde,hdf->hef", p, p), np.broadcast_to(np.eye(D), p.shape),
                               atol=1e-5)
    assert np.abs(p - np.eye(D)).max() > 0.1  # a real change of basis

    def logits(q_pos, k_pos):
        qr, kr = scheme.rotate(params, q, k, q_pos, k_pos)
        return jnp.einsum("bihd,bjhd->bhij", qr, kr)

    base = logits(pos, pos)
    for shift in ((3, 0), (0, 5), (-2, 7)):
        s = jnp.asarray(shift, jnp.int32)
        np.testing.assert_allclose(logits(pos + s, pos + s), base, rtol=1e-4, atol=1e-4)
    for shift in ((1, 0), (0, 1)):
        moved = logits(pos, pos + jnp.asarray(shift, jnp.int32))
        assert np.abs(np.asarray(moved - base)).max() > 1e-2, shift


def test_starts_as_rope2d_errors_and_listing():
    q, k, _, _, pos, _, _ = _inputs(2)
    for mode in ("axial", "mixed"):
        string = positions.make("string", mode=mode, rotate_init=False).bind(DIMS)
        rope2d = positions.make("rope2d", mode=mode, rotate_init=False).bind(DIMS)
        sp, rp = string.init_layer(jax.random.key(0)), rope2d.init_layer(jax.random.key(0))
        np.testing.assert_array_equal(sp["cayley"], np.zeros((H, D, D)))
        for x, y in zip(string.rotate(sp, q, k, pos, pos), rope2d.rotate(rp, q, k, pos, pos)):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)
    with pytest.raises(ConfigError, match="position.mode"):
        positions.make("string", mode="circulant")
    with pytest.raises(ConfigError, match="model.causal"):
        positions.make("string").bind(dataclasses.replace(DIMS, causal=True))
    with pytest.raises(ConfigError, match="model.head_dim"):
        positions.make("string").bind(dataclasses.replace(DIMS, head_dim=6, hidden=12))
    assert "string  (hooks: rotate; 2-D positions)" in listing("schemes")
