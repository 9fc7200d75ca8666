"""FoPE, Fourier Position Embedding (Hua et al. 2024, "Fourier Position Embedding: Enhancing
Attention's Periodic Extension for Length Generalization", ICML 2025; its public code,
`FourierEmbedding` in olmo/model.py, read in the copy yiju-zhao/Fourier-Position-Embedding).

RoPE gives pair j of a head the single frequency omega_j: (cos, sin)(p omega_j). Hua et al.
argue that the linear layers and activations mix frequencies anyway (spectrum damage), and
that frequencies too low to complete a period within the training length T are never
trained as periodic. FoPE therefore (1) zeroes every RoPE frequency below the floor 2 pi / T
and drops it from the basis, keeping the M frequencies omega_m >= 2 pi / T, and (2) gives
each of the first P = min(M, D/4) pairs of every head a Fourier series over them instead of
one frequency:

    C_hj(p) = sum_m cos(p omega_m) a_hmj,   S_hj(p) = sum_m sin(p omega_m) b_hmj

and turns the pair (x_j, x_j') to (x_j C - x_j' S, x_j' C + x_j S), for queries and keys
alike. The other D/2 - P pairs carry no position (frequency 0: C = 1, S = 0). The
coefficients a, b [H, M, P] of every layer start at a strided identity (output j reads
frequency j * ceil(M / P): FoPE starts as RoPE on those frequencies) plus Xavier-normal
noise of gain `init_gain` (0.3 in the paper's 60M configs), as the reference's
`eye_xavier_norm` with separate sin / cos bases per head.

Differences from the reference code, all deliberate:
- its coefficients stay fixed at their random start by default (`fourier_learnable=False`);
  here they are layer parameters and train (posjax has no frozen parameters; the paper's
  `fourier_learnable=True` variant). The parameters are the offsets from the strided
  identity (`cos_delta`, `sin_delta`), so weight decay pulls FoPE towards RoPE on the kept
  frequencies rather than towards no position at all;
- it pads the position-free pairs with cos = sin = 1 (a fixed 45-degree turn scaled by
  sqrt(2), so their q.k doubles); here they are left as they are (the paper's frequency 0).
Pairing follows `interleaved` (the reference is half-split, False, the default here). With
a, b the identity selection FoPE is RoPE on the kept frequencies, so logits depend on i - j
only; with general coefficients they need not (C and S mix frequencies). T is
`trained_length` (None: the model's max_length when built, then kept fixed).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Optional

import jax
import jax.numpy as jnp
import numpy as np

from posjax.errors import ConfigError
from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.registry import register


def fope_freqs(head_dim: int, base: float, trained_length: int) -> np.ndarray:
    """The RoPE frequencies base**(-2i/D) at or above the floor 2 pi / T (float64, falling)."""
    theta = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    return theta[theta >= 2 * math.pi / trained_length]


def strided_eye(inputs: int, outputs: int) -> np.ndarray:
    """[inputs, outputs]: output j reads input j * ceil(inputs / outputs)."""
    eye = np.zeros((inputs, outputs), np.float32)
    step = -(-inputs // outputs)
    for j in range(outputs):
        if j * step < inputs:
            eye[j * step, j] = 1.0
    return eye


def turn_pairs(x: jax.Array, cos: jax.Array, sin: jax.Array, interleaved: bool) -> jax.Array:
    """(a, b) -> (a cos - b sin, b cos + a sin) for the first P pairs of x [..., D] with
    cos, sin [..., P] (not necessarily a rotation); the other pairs unchanged. float32 math."""
    dim, pairs = x.shape[-1], cos.shape[-1]
    xf = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    if interleaved:
        a, b = xf[..., 0:2 * pairs:2], xf[..., 1:2 * pairs:2]
    else:
        a, b = xf[..., :pairs], xf[..., dim // 2:dim // 2 + pairs]
    ra, rb = a * cos - b * sin, b * cos + a * sin
    if interleaved:
        turned = jnp.stack([ra, rb], -1).reshape(ra.shape[:-1] + (2 * pairs,))
        out = jnp.concatenate([turned, xf[..., 2 * pairs:]], -1)
    else:
        out = jnp.concatenate([ra, xf[..., pairs:dim // 2], rb, xf[..., dim // 2 + pairs:]], -1)
    return out.astype(x.dtype)


@register
@dataclasses.dataclass(frozen=True)
class Fope(Scheme):
    """FoPE; see the module docstring. Fields: base (RoPE's, 10000), trained_length (T;
    None = model.max_length when bound), init_gain (the coefficients' noise, 0.3),
    interleaved (pairing; False = half-split as the reference)."""

    name: ClassVar[str] = "fope"

    base: float = 10000.0
    trained_length: Optional[int] = None
    init_gain: float = 0.3
    interleaved: bool = False

    def __post_init__(self):
        if isinstance(self.base, bool) or not isinstance(self.base, (int, float)) \
                or not self.base > 1:
            self.fail("base", self.base, "a number > 1")
        T = self.trained_length
        if T is not None and (isinstance(T, bool) or not isinstance(T, (int, np.integer))
                              or T < 7):
            self.fail("trained_length", T, "None (= model.max_length) or an int >= 7 (the "
                      "fastest frequency, 1, has a period of 2 pi)")
        g = self.init_gain
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not g >= 0:
            self.fail("init_gain", g, "a number >= 0 (0: start exactly as RoPE)")
        if not isinstance(self.interleaved, bool):
            self.fail("interleaved", self.interleaved, "True or False")

    def bound_values(self, dims: Dims) -> dict:
        return {"trained_length": dims.max_length} if self.trained_length is None else {}

    def kept_fields(self) -> dict:
        """A longer model keeps the frequency floor of the trained length."""
        return {"trained_length": int(self.frequency_floor_length)}

    @property
    def frequency_floor_length(self) -> int:
        return self.bound_dims.max_length if self.trained_length is None else self.trained_length

    def check(self, dims: Dims, length: int) -> None:
        super().check(dims, length)
        if dims.head_dim % 2 or dims.head_dim < 4:
            raise ConfigError("model.head_dim", dims.head_dim,
                              "an even number >= 4: position 'fope' turns pairs of dims and "
                              "gives a quarter of them a Fourier series")
        T = dims.max_length if self.trained_length is None else self.trained_length
        if T < 7:
            self.fail("trained_length", self.trained_length, f"an int >= 7 when "
                      f"model.max_length = {dims.max_length} is below the fastest period")

    def frequencies(self) -> np.ndarray:
        """The M kept frequencies [M] (float64)."""
        return fope_freqs(self.bound_dims.head_dim, self.base, self.frequency_floor_length)

    def series_pairs(self) -> int:
        """P = min(M, D/4): the pairs of each head that carry a Fourier series."""
        return min(len(self.frequencies()), self.bound_dims.head_dim // 4)

    def init_layer(self, rng: jax.Array) -> Params:
        heads, inputs, outputs = self.bound_dims.num_heads, len(self.frequencies()), \
            self.series_pairs()
        # torch's xavier_normal_ fans for [H, M, P]: fan_in = M * P, fan_out = H * P
        std = self.init_gain * math.sqrt(2.0 / (inputs * outputs + heads * outputs))
        cos_rng, sin_rng = jax.random.split(rng)
        return {name: std * jax.random.normal(r, (heads, inputs, outputs), jnp.float32)
                for name, r in (("cos_delta", cos_rng), ("sin_delta", sin_rng))}

    def coefficients(self, params) -> tuple[jax.Array, jax.Array]:
        """(a, b) [H, M, P] float32: the strided identity plus the learned offsets."""
        eye = jnp.asarray(strided_eye(len(self.frequencies()), self.series_pairs()))
        return (eye + params["cos_delta"].astype(jnp.float32),
                eye + params["sin_delta"].astype(jnp.float32))

    def series(self, params, pos: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(C, S) [B, L, H, P] float32 at positions pos [B, L]."""
        omega = jnp.asarray(self.frequencies(), jnp.float32)
        angles = jnp.asarray(pos).astype(jnp.float32)[..., None] * omega  # [B, L, M]
        a, b = self.coefficients(params)
        return (jnp.einsum("blm,hmp->blhp", jnp.cos(angles), a),
                jnp.einsum("blm,hmp->blhp", jnp.sin(angles), b))

    def rotate(self, params, q, k, q_pos, k_pos):
        q = turn_pairs(q, *self.series(params, q_pos), self.interleaved)
        k = turn_pairs(k, *self.series(params, k_pos), self.interleaved)
        return q, k
