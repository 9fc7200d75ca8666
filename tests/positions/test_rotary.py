"""Tests of posjax/positions/rotary.py: RoPE building blocks, the Rope scheme, xPos."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from posjax.errors import ConfigError
from posjax.positions import registry
from posjax.positions.base import Dims
from posjax.positions.rotary import (
    Rope,
    apply_rope,
    apply_rotary,
    half_to_interleaved,
    rope_inv_freq,
)
from posjax.positions.xpos import XPos, xpos_scale

B, L, H, D = 2, 6, 3, 8


def _rand(shape, seed=0, dtype=jnp.float32):
    return jax.random.normal(jax.random.key(seed), shape, dtype)


def _positions(length=L, offset=0):
    return jnp.broadcast_to(jnp.arange(length) + offset, (B, length)).astype(jnp.int32)


def np_rope(x, pos, base=10000.0, interleaved=True, rot=None):
    """Straightforward float64 RoPE: loop over pairs, rotate (a, b) by pos*base**(-2i/rot)."""
    x = np.asarray(x, np.float64)
    out = x.copy()
    rot = x.shape[-1] if rot is None else rot
    for i in range(rot // 2):
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + rot // 2)
        ang = np.asarray(pos, np.float64)[..., None] * base ** (-2.0 * i / rot)  # [..., L, 1]
        out[..., a] = x[..., a] * np.cos(ang) - x[..., b] * np.sin(ang)
        out[..., b] = x[..., b] * np.cos(ang) + x[..., a] * np.sin(ang)
    return out


def _logits(q, k):
    return np.einsum("bqhd,bkhd->bhqk", np.asarray(q, np.float64), np.asarray(k, np.float64))


# -- apply_rope ------------------------------------------------------------------------------


@pytest.mark.parametrize("interleaved", [True, False])
def test_apply_rope_matches_numpy(interleaved):
    x = _rand((B, L, H, D))
    pos = jnp.array([[0, 1, 2, 3, 100, 257], [5, 4, 3, 2, 1, 0]], jnp.int32)
    got = apply_rope(x, pos, interleaved=interleaved)
    np.testing.assert_allclose(got, np_rope(x, pos, interleaved=interleaved), rtol=2e-5, atol=2e-5)
    assert got.dtype == x.dtype and got.shape == x.shape


def test_golden_pairings():
    # Hand-computed, D=4, position 1, base 10000 (theta = [1, 0.01]), x = [1, 0, 0, 1].
    # Interleaved, bert4keras backend.apply_rotary_position_embeddings / HF RoFormer:
    #   (x0,x1)=(1,0) -> (cos 1, sin 1); (x2,x3)=(0,1) -> (-sin .01, cos .01).
    # Half-split, GPT-NeoX / HF Llama rotate_half: (x0,x2)=(1,0), (x1,x3)=(0,1).
    x = jnp.array([1.0, 0.0, 0.0, 1.0]).reshape(1, 1, 1, 4)
    pos = jnp.array([[1]])
    c1, s1, c2, s2 = math.cos(1), math.sin(1), math.cos(0.01), math.sin(0.01)
    np.testing.assert_allclose(apply_rope(x, pos).ravel(), [c1, s1, -s2, c2], atol=1e-6)
    np.testing.assert_allclose(
        apply_rope(x, pos, interleaved=False).ravel(), [c1, -s2, s1, c2], atol=1e-6
    )


def test_half_and_interleaved_related_by_permutation():
    x = _rand((B, L, H, D), 1)
    pos = _positions()
    p = half_to_interleaved(D)
    np.testing.assert_array_equal(p, [0, 4, 1, 5, 2, 6, 3, 7])
    np.testing.assert_allclose(
        apply_rope(x[..., p], pos, interleaved=True),
        apply_rope(x, pos, interleaved=False)[..., p],
        rtol=1e-6,
        atol=1e-6,
    )


@pytest.mark.parametrize("interleaved", [True, False])
def test_logits_depend_only_on_relative_position(interleaved):
    q, k = _rand((B, L, H, D), 2), _rand((B, L, H, D), 3)
    qp = jnp.array([[0, 3, 7, 1, 2, 9]] * B, jnp.int32)
    kp = jnp.array([[4, 4, 0, 8, 5, 6]] * B, jnp.int32)
    rope = lambda x, p: apply_rope(x, p, interleaved=interleaved)  # noqa: E731
    base = _logits(rope(q, qp), rope(k, kp))
    for shift in (1, 37, 1000):
        shifted = _logits(rope(q, qp + shift), rope(k, kp + shift))
        np.testing.assert_allclose(shifted, base, rtol=1e-3, atol=2e-3)


def test_norm_preserved():
    x = _rand((B, L, H, D), 4)
    y = apply_rope(x, _positions(offset=300))
    np.testing.assert_allclose(jnp.linalg.norm(y, axis=-1), jnp.linalg.norm(x, axis=-1), rtol=1e-5)


def test_bf16_close_to_f32_and_angles_in_f32():
    x = _rand((B, L, H, D), 5)
    pos = jnp.array([[251, 252, 253, 255, 256, 257]] * B, jnp.int32)
    y16 = apply_rope(x.astype(jnp.bfloat16), pos)
    assert y16.dtype == jnp.bfloat16
    ref = np_rope(x.astype(jnp.bfloat16).astype(jnp.float32), pos)
    # bf16 output rounding only (8 mantissa bits); a bf16 angle at 257 would be 256 (1 rad off).
    np.testing.assert_allclose(np.asarray(y16, np.float32), ref, atol=3e-2, rtol=1e-2)
    # the same vector at 256 and 257 must come out differently rotated
    same = jnp.broadcast_to(x[:, :1], x.shape).astype(jnp.bfloat16)
    y = np.asarray(apply_rope(same, pos), np.float32)
    assert np.abs(y[:, 4, :, 0] - y[:, 5, :, 0]).max() > 0.1
    np.testing.assert_allclose(y[:, 5], np_rope(same, pos)[:, 5], atol=3e-2, rtol=1e-2)


def test_partial_rotation_leaves_tail_dims():
    x = _rand((B, L, H, D), 6)
    pos = _positions(offset=3)
    for scheme in (Rope(rotary_dim=4), Rope(rotary_fraction=0.5)):
        q, k = scheme.rotate({}, x, x, pos, pos)
        np.testing.assert_array_equal(q[..., 4:], x[..., 4:])
        # frequencies of the rotated part are those of a 4-dim RoPE (HF partial_rotary_factor)
        np.testing.assert_allclose(q[..., :4], np_rope(x[..., :4], pos), rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(k, q)


@pytest.mark.slow
def test_gradients():
    with jax.enable_x64(True):
        x = jax.random.normal(jax.random.key(7), (1, 4, 2, 6), jnp.float64)
        pos = jnp.array([[0, 2, 5, 300]])
        check_grads(lambda t: apply_rope(t, pos), (x,), order=2, modes=("fwd", "rev"))
        check_grads(lambda t: apply_rope(t, pos, interleaved=False), (x,), order=1)
        yarn = Rope(scaling="yarn", factor=4.0, original_length=16, rotary_dim=4)
        check_grads(lambda a, b: yarn.rotate({}, a, b, pos, pos), (x, x + 1), order=1)


# -- Rope scheme -----------------------------------------------------------------------------


def test_rope_scheme_is_plain_rope_and_scale():
    s = registry.make({"name": "rope", "interleaved": False})
    assert isinstance(s, Rope) and s.hooks == ("rotate",)
    q, k = _rand((B, L, H, D), 8), _rand((B, L, H, D), 9)
    pos = _positions()
    rq, rk = s.rotate({}, q, k, pos, pos)
    np.testing.assert_allclose(rq, apply_rope(q, pos, interleaved=False), rtol=1e-6)
    np.testing.assert_allclose(rk, apply_rope(k, pos, interleaved=False), rtol=1e-6)
    assert s.logit_scale(D) == pytest.approx(1 / math.sqrt(D))
    hash(s)  # static jit argument


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"scaling": "linear", "factor": 2.0},
        {"scaling": "ntk", "factor": 4.0},
        {"scaling": "yarn", "factor": 4.0, "original_length": 8},
    ],
)
def test_scaled_logits_depend_only_on_relative_position(fields):
    s = Rope(**fields)
    q, k = _rand((B, L, H, D), 10), _rand((B, L, H, D), 11)
    qp, kp = _positions(), _positions()[:, ::-1]
    ref = _logits(*s.rotate({}, q, k, qp, kp))
    got = _logits(*s.rotate({}, q, k, qp + 50, kp + 50))
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=2e-3)


def test_linear_scaling():
    q = _rand((B, L, H, D), 12)
    pos = _positions()
    plain = apply_rope(q, pos)
    one, _ = Rope(scaling="linear", factor=1.0).rotate({}, q, q, pos, pos)
    np.testing.assert_allclose(one, plain, rtol=1e-6)
    # Chen et al. 2023: position n at factor s is position n/s of plain RoPE.
    two, _ = Rope(scaling="linear", factor=2.0).rotate({}, q, q, 2 * pos, 2 * pos)
    np.testing.assert_allclose(two, plain, rtol=1e-5, atol=1e-6)


def test_dynamic_ntk_under_jit_and_below_training_length():
    s = Rope(scaling="dynamic_ntk", factor=2.0, original_length=L)
    q, k = _rand((B, L, H, D), 13), _rand((B, L, H, D), 14)
    pos = _positions()
    rotate = jax.jit(lambda a, b, p: s.rotate({}, a, b, p, p))
    rq, rk = rotate(q, k, pos)  # max position + 1 == L: plain RoPE
    np.testing.assert_allclose(rq, apply_rope(q, pos), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rk, apply_rope(k, pos), rtol=1e-6, atol=1e-6)
    # at 2L (positions 0..2L-1): base' = base * (2*2 - 1)**(D/(D-2)), HF formula
    long = _positions(2 * L)
    q2 = _rand((B, 2 * L, H, D), 15)
    rq2, _ = rotate(q2, q2, long)
    base2 = 10000.0 * 3.0 ** (D / (D - 2))
    np.testing.assert_allclose(rq2, np_rope(q2, long, base=base2), rtol=1e-4, atol=1e-4)


def test_yarn_logit_scale():
    s = Rope(scaling="yarn", factor=4.0, original_length=512)
    mscale = 0.1 * math.log(4.0) + 1.0  # = 1.1386294361...; HF multiplies cos AND sin by it
    assert s.mscale() == pytest.approx(1.138629436111989)
    assert s.logit_scale(64) == pytest.approx(mscale**2 / 8.0)
    assert Rope(scaling="yarn", factor=4.0, original_length=512, attention_factor=1.0).logit_scale(
        64
    ) == pytest.approx(1 / 8)
    assert Rope(scaling="ntk", factor=4.0).logit_scale(64) == pytest.approx(1 / 8)


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"scaling": "bogus"}, "position.scaling"),
        ({"scaling": "linear", "factor": 0.5}, "position.factor"),
        ({"factor": 2.0}, "position.factor"),
        ({"scaling": "yarn", "factor": 2.0}, "position.original_length"),
        ({"scaling": "dynamic_ntk", "factor": 2.0}, "position.original_length"),
        ({"rotary_dim": 3}, "position.rotary_dim"),
        ({"rotary_dim": 4, "rotary_fraction": 0.5}, "position.rotary_dim"),
        ({"rotary_fraction": 1.5}, "position.rotary_fraction"),
        ({"base": 1.0}, "position.base"),
    ],
)
def test_bad_rope_config(fields, field):
    with pytest.raises(ConfigError) as err:
        registry.make({"name": "rope", **fields})
    assert err.value.field == field


def test_bad_rope_dims():
    dims = Dims(num_heads=2, head_dim=7, hidden=14, max_length=16)
    with pytest.raises(ConfigError, match="head_dim=7.*rope"):
        Rope().check(dims, 16)
    even = Dims(num_heads=2, head_dim=8, hidden=16, max_length=16)
    Rope().check(even, 16)
    with pytest.raises(ConfigError, match="rotary_dim=10"):
        Rope(rotary_dim=10).check(even, 16)
    with pytest.raises(ConfigError, match="rotary_fraction"):
        Rope(rotary_fraction=0.25).check(Dims(2, 4, 8, 16), 16)  # 1 rotated dim
    with pytest.raises(ConfigError, match="head_dim=7"):
        apply_rope(_rand((1, 2, 1, 7)), jnp.array([[0, 1]]))


# -- xPos ------------------------------------------------------------------------------------


def test_xpos_scale_golden():
    # torchscale XPOS: scale = (arange(0, D, 2) + 0.4 D) / (1.4 D), raised to n / scale_base.
    zeta = np.array([3.2, 5.2, 7.2, 9.2]) / 11.2  # D = 8: [0.2857, 0.4643, 0.6429, 0.8214]
    got = xpos_scale(jnp.array([0, 512, 256, -512]), 8)
    np.testing.assert_allclose(got[0], np.ones(4), rtol=1e-6)
    np.testing.assert_allclose(got[1], zeta, rtol=1e-6)
    np.testing.assert_allclose(got[2], np.sqrt(zeta), rtol=1e-6)
    np.testing.assert_allclose(got[3], 1 / zeta, rtol=1e-6)
    np.testing.assert_allclose(got[1, 0], 2 / 7, rtol=1e-6)


def test_xpos_rotate_matches_torchscale_form():
    s = registry.make({"name": "xpos", "scale_base": 8.0})
    assert isinstance(s, XPos)
    q, k = _rand((B, L, H, D), 16), _rand((B, L, H, D), 17)
    pos = _positions(offset=2)
    rq, rk = s.rotate({}, q, k, pos, pos)
    # torchscale apply_rotary_pos_emb: (x*cos + rotate_every_two(x)*sin) with cos, sin * scale,
    # duplicate_interleave'd: the interleaved rotation times the per-pair scale.
    up = np.repeat(np.asarray(xpos_scale(pos, D, 8.0)), 2, axis=-1)[:, :, None, :]
    np.testing.assert_allclose(rq, np_rope(q, pos) * up, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rk, np_rope(k, pos) / up, rtol=1e-4, atol=1e-5)
    # logits still depend on i - j only
    rq2, rk2 = s.rotate({}, q, k, pos + 20, pos + 20)
    np.testing.assert_allclose(_logits(rq2, rk2), _logits(rq, rk), rtol=1e-3, atol=1e-3)


def test_xpos_rejects_bidirectional_and_too_long():
    s = XPos()
    with pytest.raises(ConfigError, match="model.causal=False.*blows up") as err:
        s.check(Dims(2, 8, 16, 64, causal=False), 64)
    assert err.value.field == "model.causal"
    s.check(Dims(2, 8, 16, 64, causal=True), 64)
    with pytest.raises(ConfigError, match="scale_base"):
        s.check(Dims(2, 8, 16, 10**6, causal=True), 10**6)
    with pytest.raises(ConfigError, match="head_dim=7"):
        s.check(Dims(2, 7, 14, 64, causal=True), 64)
    with pytest.raises(ConfigError, match="gamma"):
        XPos(gamma=0.0)


def test_apply_rotary_per_row_frequencies():
    # a [B, R/2] frequency table (dynamic NTK) rotates each batch row with its own row
    x = _rand((B, L, H, D), 18)
    pos = _positions()
    inv = jnp.stack([rope_inv_freq(D, 10000.0), rope_inv_freq(D, 500.0)])
    got = apply_rotary(x, pos, inv)
    np.testing.assert_allclose(got[0], np_rope(x[0], pos[0]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], np_rope(x[1], pos[1], base=500.0), rtol=1e-5, atol=1e-5)


def test_registry_paths():
    from posjax.positions.rerope import LeakyReRope, ReRope

    assert registry.scheme_class("rerope") is ReRope
    assert registry.scheme_class("leaky_rerope") is LeakyReRope
