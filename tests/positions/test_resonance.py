"""Resonance RoPE (`resonance`): frequencies against a numpy transcription of the authors'
`ResonanceRotaryEmbedding` / `ResonanceYaRNScalingRotaryEmbedding`, attention against a
direct definition with explicit rotation matrices (values and gradients, reference, chunked
and rows), its defining properties (integer wavelengths, angles that repeat after them,
relative logits) and its composition with YaRN through `extend`, as in the paper."""

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

B, L, H, D = 2, 9, 2, 16
T = 64
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=T)
TOL = dict(rtol=2e-5, atol=2e-5)
PATHS = ("reference", "chunked", "rows")


def authors_freqs(dim, base, *, factor=1.0, original_length=None, beta_fast=32, beta_slow=1):
    """The authors' code in float64 numpy: theta_i = base**(-2i/dim) (YaRN: blended with
    theta_i / s by the linear ramp between the correction dims), then
    r_wavelengths = round(2 pi / theta), r_inv_freq = 2 pi / r_wavelengths."""
    theta = 1.0 / base ** (np.arange(0, dim, 2) / dim)
    if original_length is not None:
        def corr(rot):
            return dim * math.log(original_length / (rot * 2 * math.pi)) / (2 * math.log(base))
        low = max(math.floor(corr(beta_fast)), 0)
        high = min(math.ceil(corr(beta_slow)), dim - 1)
        ramp = np.clip((np.arange(dim // 2) - low) / ((high - low) or 0.001), 0, 1)
        keep = 1 - ramp
        theta = theta / factor * (1 - keep) + theta * keep
    return 2 * math.pi / np.round(2 * math.pi / theta)


def rotation(angles):
    c, s = jnp.cos(angles), jnp.sin(angles)
    out = jnp.zeros(angles.shape[:-1] + (D, D))
    for t in range(D // 2):
        i, j = 2 * t, 2 * t + 1
        out = out.at[..., i, i].set(c[..., t]).at[..., i, j].set(-s[..., t])
        out = out.at[..., j, i].set(s[..., t]).at[..., j, j].set(c[..., t])
    return out


def direct(q, k, v, pos, freqs, mscale=1.0):
    """softmax(mscale**2 (R(p_i) q_i) . (R(p_j) k_j) / sqrt(D)) v: the authors multiply cos
    and sin (so q and k) by YaRN's mscale."""
    rot = rotation(pos.astype(jnp.float32)[..., None] * jnp.asarray(freqs, jnp.float32))
    qr = jnp.einsum("blde,blhe->blhd", rot, q) * mscale
    kr = jnp.einsum("blde,blhe->blhd", rot, k) * mscale
    logits = jnp.einsum("bihd,bjhd->bhij", qr, kr) / np.sqrt(D)
    return jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits, -1), v)


def _inputs(seed=0, span=4 * T):
    rng = np.random.RandomState(seed)
    q, k, v, ct = (jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))
    pos = jnp.asarray(np.sort(rng.choice(span, (B, L), replace=False), axis=1), jnp.int32)
    return q, k, v, ct, pos


def test_frequencies_match_the_authors_code_and_wavelengths_are_integers():
    scheme = positions.make("resonance").bind(DIMS)
    got = np.asarray(scheme.inv_freq(D))
    np.testing.assert_allclose(got, authors_freqs(D, 10000.0), rtol=1e-6)
    wavelengths = 2 * math.pi / got.astype(np.float64)
    np.testing.assert_allclose(wavelengths, np.round(wavelengths), atol=1e-3)
    plain = np.asarray(positions.make("rope").bind(DIMS).inv_freq(D))
    assert not np.allclose(got, plain)  # 6.28 -> 6, 19.87 -> 20, ...
    # rounded_length: only the wavelengths up to it are rounded (the pre-critical dims)
    part = np.asarray(positions.make("resonance", rounded_length=T).bind(DIMS).inv_freq(D))
    short = 2 * math.pi / plain <= T
    np.testing.assert_allclose(part[short], got[short], rtol=1e-6)
    np.testing.assert_allclose(part[~short], plain[~short], rtol=1e-6)


def _run(scheme, pos, q, k, v, ct, impl):
    def f(q, k, v):
        return attend(q, k, v, scheme=scheme, q_pos=pos, k_pos=pos, implementation=impl,
                      block_q=4, block_k=4)
    return jax.jit(lambda: (f(q, k, v), jax.grad(lambda *a: (f(*a) * ct).sum(),
                                                 (0, 1, 2))(q, k, v)))()


@pytest.mark.slow
def test_matches_direct_definition_values_and_grads_with_and_without_yarn():
    q, k, v, ct, pos = _inputs()
    plain = positions.make("resonance").bind(DIMS)
    # Resonance YaRN: the trained model extended by YaRN to 4T, as eval.py / Pretrained do
    ext = plain.extend("yarn", 4 * T)
    assert ext.fields == {"scaling": "yarn", "factor": 4.0, "original_length": T}
    yarn = positions.make({"name": "resonance", **ext.fields}).bind(
        dataclasses.replace(DIMS, max_length=4 * T))
    cases = ((plain, authors_freqs(D, 10000.0), 1.0),
             (yarn, authors_freqs(D, 10000.0, factor=4.0, original_length=T),
              0.1 * math.log(4.0) + 1))
    for scheme, freqs, mscale in cases:
        np.testing.assert_allclose(scheme.inv_freq(D), freqs, rtol=1e-6)

        def mine(q, k, v, freqs=freqs, mscale=mscale):
            return direct(q, k, v, pos, freqs, mscale)

        want, want_grads = jax.jit(lambda: (mine(q, k, v), jax.grad(
            lambda *a: (mine(*a) * ct).sum(), (0, 1, 2))(q, k, v)))()
        for impl in PATHS:
            got, grads = _run(scheme, pos, q, k, v, ct, impl)
            np.testing.assert_allclose(got, want, err_msg=impl, **TOL)
            for a, b in zip(grads, want_grads):
                np.testing.assert_allclose(a, b, err_msg=impl, **TOL)


def test_angles_repeat_after_each_wavelength_and_logits_are_relative():
    q, k, _, _, pos = _inputs(1)
    scheme = positions.make("resonance").bind(DIMS)
    theta = np.asarray(scheme.inv_freq(D), np.float64)
    lam = np.round(2 * math.pi / theta).astype(int)
    p = np.arange(300)
    for t in range(D // 2):  # every pair comes back to the same point after lam_t positions
        np.testing.assert_allclose(np.cos((p + lam[t]) * theta[t]), np.cos(p * theta[t]),
                                   atol=1e-6)
    rope_theta = np.asarray(positions.make("rope").bind(DIMS).inv_freq(D), np.float64)
    assert np.abs(np.cos(300 * rope_theta[1]) - np.cos((300 - 20) * rope_theta[1])) > 1e-2

    def logits(q_pos, k_pos):
        qr, kr = scheme.rotate({}, q, k, q_pos, k_pos)
        return jnp.einsum("bihd,bjhd->bhij", qr, kr)

    base = logits(pos, pos)
    np.testing.assert_allclose(logits(pos + 123, pos + 123), base, rtol=1e-4, atol=1e-4)
    assert np.abs(np.asarray(logits(pos, pos + 1) - base)).max() > 1e-2


def test_methods_bad_fields_and_listing():
    cls = positions.scheme_class("resonance")
    assert list(cls.offered_methods()) == ["as_is", "linear", "ntk", "dynamic_ntk", "yarn",
                                           "llama3"]
    assert positions.method_owner("yarn") is positions.scheme_class("rope")
    with pytest.raises(positions.NotApplicable):
        positions.make("resonance").bind(DIMS).extend("rerope", 4 * T)
    for value in (0, 2.5, True, "64"):
        with pytest.raises(ConfigError, match="position.rounded_length") as err:
            positions.make("resonance", rounded_length=value)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="position.scaling"):
        positions.make("resonance", scaling="bogus")
    assert "resonance  (hooks: rotate, rotate_values)" in listing("schemes")
    assert "rounded_length=None" in listing("schemes")
