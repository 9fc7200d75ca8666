"""Tests of posjax/positions/rope_scaling.py: golden frequencies of NTK, dynamic NTK and YaRN."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from posjax.positions import rope_scaling as rs
from posjax.positions.rotary import Rope


def hf_yarn_inv_freq(dim, base, factor, original_length, beta_fast=32, beta_slow=1):
    """Independent float64 numpy transcription of HF transformers modeling_rope_utils.py
    `_compute_yarn_parameters` (find_correction_dim / find_correction_range /
    linear_ramp_factor), for golden vectors."""
    def corr_dim(rot):
        return dim * math.log(original_length / (rot * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(corr_dim(beta_fast)), 0)
    high = min(math.ceil(corr_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
    pos_freqs = base ** (np.arange(0, dim, 2) / dim)
    extra, inter = 1 / pos_freqs, 1 / (factor * pos_freqs)
    extra_factor = 1 - ramp
    return inter * (1 - extra_factor) + extra * extra_factor, (low, high)


def test_yarn_golden_d64_l512_s4():
    ref, (low, high) = hf_yarn_inv_freq(64, 10000.0, 4.0, 512)
    # corr_dim(32) = 64 ln(512/(64 pi)) / (2 ln 1e4) = 3.2475 -> 3;
    # corr_dim(1)  = 64 ln(512/(2 pi))  / (2 ln 1e4) = 15.2887 -> 16.
    assert (low, high) == (3, 16)
    assert rs.yarn_correction_range(64, 10000.0, 512) == (3, 16)
    got = rs.yarn_inv_freq(64, 10000.0, 4.0, 512)
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    theta = 10000.0 ** (-np.arange(0, 64, 2) / 64)
    np.testing.assert_allclose(got[:4], theta[:4], rtol=1e-6)  # extrapolated (ramp 0)
    np.testing.assert_allclose(got[16:], theta[16:] / 4, rtol=1e-6)  # interpolated
    # one ramp point by hand: i = 8, ramp = (8-3)/13, weight of theta_8 = 8/13
    np.testing.assert_allclose(got[8], theta[8] * (8 / 13 + (5 / 13) / 4), rtol=1e-6)
    assert rs.yarn_mscale(4.0) == pytest.approx(1.138629436111989)  # 0.1 ln 4 + 1
    assert rs.yarn_mscale(1.0) == 1.0
    scheme = Rope(scaling="yarn", factor=4.0, original_length=512)
    np.testing.assert_allclose(scheme.inv_freq(64), ref, rtol=1e-6)


def test_yarn_factor_one_is_rope_and_clamp():
    np.testing.assert_allclose(
        rs.yarn_inv_freq(16, 10000.0, 1.0, 64), rs.rope_inv_freq(16, 10000.0), rtol=1e-6
    )
    # a long pretraining length pushes high past dim/2 - 1; HF clamps to dim - 1 only
    ref, (low, high) = hf_yarn_inv_freq(16, 100.0, 8.0, 65536)
    assert high > 16 // 2 - 1
    np.testing.assert_allclose(rs.yarn_inv_freq(16, 100.0, 8.0, 65536), ref, rtol=1e-6)


def test_ntk_base():
    # fixed NTK: base * s**(d/(d-2)); d = 64, s = 4: 10000 * 4**(64/62) = 41792.7...
    assert rs.ntk_base(10000.0, 4.0, 64) == pytest.approx(10000 * 4 ** (64 / 62))
    inv = Rope(scaling="ntk", factor=4.0).inv_freq(64)
    theta = rs.rope_inv_freq(64, 10000.0)
    # defining property: the highest frequency is kept, the lowest is divided by exactly s
    np.testing.assert_allclose(inv[0], 1.0)
    np.testing.assert_allclose(inv[-1], theta[-1] / 4, rtol=1e-5)


def test_dynamic_ntk_golden():
    # HF _compute_dynamic_ntk_parameters, d = 64, L = 512, s = 2, current length n = 1024:
    # base' = 10000 * (2*1024/512 - (2-1))**(64/62) = 10000 * 3**(64/62) = 31082.2366...
    got = rs.dynamic_ntk_base(10000.0, 2.0, 64, jnp.array([1024, 512, 100]), 512)
    np.testing.assert_allclose(got, [31082.236667168814, 10000.0, 10000.0], rtol=1e-6)
    k_pos = jnp.arange(1024)[None]
    inv = Rope(scaling="dynamic_ntk", factor=2.0, original_length=512).inv_freq(64, k_pos)
    assert inv.shape == (1, 32)
    np.testing.assert_allclose(inv[0], 31082.236667168814 ** (-np.arange(0, 64, 2) / 64), rtol=1e-5)
    # continuous at n = L + 1: barely above plain
    just = rs.dynamic_ntk_base(10000.0, 2.0, 64, 513, 512)
    assert 10000.0 < float(just) < 10000.0 * 1.01


def test_linear_inv_freq():
    np.testing.assert_allclose(
        rs.linear_inv_freq(8, 10000.0, 4.0), rs.rope_inv_freq(8, 10000.0) / 4, rtol=1e-7
    )
    np.testing.assert_allclose(rs.rope_inv_freq(4, 10000.0), [1.0, 0.01], rtol=1e-7)
