"""RoPE context-extension scalings as pure functions of the rotary frequencies.

Every scaling below changes only the inverse frequencies theta_i (and, for YaRN, the logit
temperature); the rotation itself is `rotary.apply_rotary`. Keeping the two apart lets the
attention kernel compute frequencies once per call and rotate tiles on chip.

Notation: d = the number of rotated dims (the head dim, or less with partial rotation),
L = the PRETRAINING length (`original_length`), s = `factor` (target length / L).

  linear (position interpolation, Chen et al. 2023):  theta_i / s   (== positions / s)
  ntk (NTK-aware, fixed; bloc97):                     base' = base * s**(d/(d-2))
  dynamic_ntk (emozilla):                             base' = base * (s*n/L - (s-1))**(d/(d-2))
                                                      when n > L, else base; n = current length
  yarn (Peng et al. 2023):                            per-dim blend of theta_i and theta_i / s,
                                                      logits times (0.1*ln(s) + 1)**2
  llama3 (Llama 3.1):                                 keep theta_i whose wavelength < L/high,
                                                      theta_i / s past L/low, smooth blend between
  longrope (Ding et al. 2024, Phi-3):                 theta_i / f_i, f = short factors while
                                                      n <= L, long beyond; logits times
                                                      (1 + ln(s)/ln(L)) (its factor squared)
  proportional (p-RoPE, Gemma):                       the first p pairs keep base**(-2i/D) with
                                                      the FULL head dim D; the other pairs get
                                                      frequency 0 (not rotated); all / s

Checked against huggingface/transformers `src/transformers/modeling_rope_utils.py`
(`_compute_linear_scaling_rope_parameters`, `_compute_ntk_parameters`,
`_compute_dynamic_ntk_parameters`, `_compute_yarn_parameters`, `_compute_llama3_parameters`,
`_compute_longrope_parameters`, `_compute_proportional_rope_parameters`) and jquesnelle/yarn
`scaled_rope/LlamaYaRNScaledRotaryEmbedding.py`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

SCALINGS = ("none", "linear", "ntk", "dynamic_ntk", "yarn", "llama3", "longrope", "proportional")
# Scalings that read the pretraining length L (`Rope.original_length`).
NEEDS_ORIGINAL_LENGTH = ("dynamic_ntk", "yarn", "llama3", "longrope")
# Scalings a trained model can be run with after the fact (Rope.extend_methods), one line each.
# longrope needs per-dim factors searched for the model and proportional (p-RoPE) is a
# training-time choice of dropped frequencies: neither is a post-hoc method.
POST_HOC = {
    "linear": "position interpolation: positions squeezed by 1/s",
    "ntk": "NTK-aware base: base * s**(d/(d-2))",
    "dynamic_ntk": "NTK base from the running length n: base * (s*n/L - (s-1))**(d/(d-2))",
    "yarn": "YaRN: per-frequency ramp between interpolation and none, logits scaled",
    "llama3": "Llama 3.1: low frequencies divided by s, high ones kept, smooth between",
}


def rope_inv_freq(dim: int, base=10000.0) -> jax.Array:
    """Inverse frequencies theta_i = base**(-2i/dim), i < dim/2, in float32.

    `base` may be a Python float (result [dim/2]) or an array of bases [...] (result
    [..., dim/2]); dynamic NTK uses the latter with one base per batch row.
    """
    exponent = jnp.arange(0, dim, 2, dtype=jnp.float32) / dim
    base = jnp.asarray(base, jnp.float32)
    return 1.0 / base[..., None] ** exponent


def linear_inv_freq(dim: int, base: float, factor: float) -> jax.Array:
    """Position interpolation: angles n*theta_i/s, i.e. positions squeezed by 1/s."""
    return rope_inv_freq(dim, base) / factor


def ntk_base(base: float, factor: float, dim: int) -> float:
    """Fixed NTK-aware base: base * s**(d/(d-2)). Stretches the lowest frequency by exactly s
    while leaving the highest (theta_0 = 1) untouched."""
    return base * factor ** (dim / (dim - 2))


def dynamic_ntk_base(base: float, factor: float, dim: int, seq_len, original_length: int):
    """Dynamic NTK base for the current length `seq_len` (an int array under jit).

    base * (s*n/L - (s-1))**(d/(d-2)) when n > L, else base: the bracket equals 1 at n == L,
    so the frequencies grow continuously out of plain RoPE. Same as HF
    `_compute_dynamic_ntk_parameters`, whose seq_len is `max(position_ids) + 1`.
    """
    n = jnp.asarray(seq_len, jnp.float32)
    ratio = factor * n / original_length - (factor - 1.0)
    scaled = base * jnp.maximum(ratio, 1.0) ** (dim / (dim - 2))
    return jnp.where(n > original_length, scaled, jnp.float32(base))


def yarn_correction_dim(num_rotations: float, dim: int, base: float, original_length: int) -> float:
    """The (fractional) dim index whose wavelength fits `num_rotations` times into L.

    Solves L / (2*pi*base**(2i/d)) = r for i: d*ln(L/(2*pi*r)) / (2*ln(base)).
    """
    return dim * math.log(original_length / (num_rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_correction_range(
    dim: int, base: float, original_length: int, beta_fast: float = 32.0, beta_slow: float = 1.0
) -> tuple[int, int]:
    """(low, high) dim indices of the YaRN ramp: floor(corr_dim(beta_fast)),
    ceil(corr_dim(beta_slow)), clamped to [0, dim-1] exactly as HF and jquesnelle/yarn do
    (the ramp runs over dim/2 indices, so a `high` past dim/2-1 just never reaches 1)."""
    low = math.floor(yarn_correction_dim(beta_fast, dim, base, original_length))
    high = math.ceil(yarn_correction_dim(beta_slow, dim, base, original_length))
    return max(low, 0), min(high, dim - 1)


def yarn_inv_freq(
    dim: int,
    base: float,
    factor: float,
    original_length: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> jax.Array:
    """YaRN "NTK-by-parts" frequencies [dim/2] float32.

    Dims that rotate more than beta_fast times within L (index < low) keep theta_i
    (extrapolate: they already saw every angle in training); dims rotating fewer than
    beta_slow times (index > high) are interpolated to theta_i / s; a linear ramp blends
    the two in between.
    """
    low, high = yarn_correction_range(dim, base, original_length, beta_fast, beta_slow)
    if low == high:
        high += 0.001  # the references' guard against a zero-width ramp
    ramp = jnp.clip((jnp.arange(dim // 2, dtype=jnp.float32) - low) / (high - low), 0.0, 1.0)
    extrapolation = rope_inv_freq(dim, base)
    interpolation = extrapolation / factor
    keep = 1.0 - ramp  # weight of the unscaled frequency
    return interpolation * (1.0 - keep) + extrapolation * keep


def yarn_mscale(factor: float) -> float:
    """YaRN attention factor 0.1*ln(s) + 1 (1 for s <= 1).

    HF and jquesnelle/yarn multiply cos and sin by it, i.e. both q and k, so the logits grow
    by its SQUARE; posjax applies the square once through `Rope.logit_scale`.
    """
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def llama3_inv_freq(
    dim: int,
    base: float,
    factor: float,
    original_length: int,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
) -> jax.Array:
    """Llama 3.1 frequencies [dim/2] float32.

    Wavelengths 2*pi/theta_i shorter than L/high_freq_factor are kept (they turned many times
    within L); longer than L/low_freq_factor are divided by s; in between, the blend
    (1 - smooth)*theta/s + smooth*theta with smooth = (L/wavelen - low)/(high - low), which
    runs from 0 at the low edge to 1 at the high edge, so the result is continuous.
    """
    theta = rope_inv_freq(dim, base)
    wavelen = 2 * math.pi / theta
    smooth = (original_length / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1.0 - smooth) * theta / factor + smooth * theta
    out = jnp.where(wavelen > original_length / low_freq_factor, theta / factor, blended)
    return jnp.where(wavelen < original_length / high_freq_factor, theta, out)


def longrope_inv_freq(dim: int, base: float, factors) -> jax.Array:
    """LongRoPE frequencies theta_i / f_i [..., dim/2] for per-pair factors f [..., dim/2]."""
    return rope_inv_freq(dim, base) / jnp.asarray(factors, jnp.float32)


def longrope_attention_factor(factor: float, original_length: int) -> float:
    """LongRoPE's default attention factor sqrt(1 + ln(s)/ln(L)) (1 for s <= 1). Like YaRN's
    it multiplies cos and sin, so the logits grow by its square."""
    if factor <= 1:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(original_length))


def proportional_inv_freq(head_dim: int, base: float, pairs: int, factor: float = 1.0):
    """p-RoPE frequencies [head_dim/2] float32: base**(-2i/head_dim) / s for i < pairs, 0 after.

    The exponent keeps the FULL head dim, so the rotated pairs turn at exactly the speeds
    they have in full RoPE and only the slowest ones are dropped; partial rotation
    (`rotary_dim`) instead spreads base**(-2i/R) over the R rotated dims. Frequency 0 is an
    identity rotation, so every pairing convention leaves those pairs unchanged.
    """
    theta = rope_inv_freq(head_dim, base)
    keep = jnp.arange(head_dim // 2) < pairs
    return jnp.where(keep, theta, 0.0) / factor
