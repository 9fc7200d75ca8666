"""Complex order embeddings (Wang et al., ICLR 2020, "Encoding word order in complex embeddings").

The paper embeds word j at position pos as a complex vector with, per dim d,
    z_{j,d}(pos) = r_{j,d} * exp(i * (w_{j,d} * pos + theta_{j,d}))
amplitude r, per-word frequency w and initial phase theta all learned. posjax keeps the
rest of the model real, so the embed hook maps a real E-dim token embedding to a real E-dim
output that IS a complex E/2-dim vector written as [real part | imaginary part]:

    a = x[..., :E/2] + i * x[..., E/2:]          (the token embedding as complex amplitude)
    z = a * exp(i * (w[id] * pos + theta[id]))    (w, theta: per-word tables [vocab, E/2])
    out = concat(Re z, Im z)

Choice vs the paper: the amplitude is the (complex) token embedding itself instead of a
separate real r. This keeps E parameters per word for the amplitude, reuses the model's token
table unchanged, and contains the paper's form as the case x[..., E/2:] = 0 (a real r). What
the paper's analysis needs still holds exactly:
  * |z_d| = |a_d| for every dim: position only rotates, it never rescales;
  * the real dot product of two outputs is Re(sum_d z1_d * conj(z2_d)), and when both words
    have the same frequencies it equals Re(sum_d a1_d conj(a2_d) exp(i(w_d (p1-p2) + theta1_d
    - theta2_d))): positions enter only through p1 - p2 (relative order from absolute
    embeddings, the paper's central property).

Init (as FreedomIntelligence/complex-order `get_sinusoid_encoding_table`, which starts every
word's frequencies at the sinusoid inverse frequencies): w[v, d] = base**(-2d/E) for every
word v, theta = 0, so at init the scheme is a RoPE-like rotation of the token embedding and
position 0 is the identity. Angles are float32; the rotation is applied in x's dtype.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from posjax.errors import ConfigError
from posjax.positions.absolute import take_rows
from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.registry import register


def complex_order_embedding(
    x: jax.Array, pos: jax.Array, freq: jax.Array, phase: jax.Array
) -> jax.Array:
    """Rotate `x [..., E]` (as E/2 complex numbers [re | im]) by `freq * pos + phase`.

    `freq`, `phase`: `[..., E/2]` per-token frequencies and phases (already gathered by
    token id); `pos [...]` integer or float positions.
    """
    half = x.shape[-1] // 2
    dtype = jnp.promote_types(jnp.promote_types(freq.dtype, phase.dtype), jnp.float32)
    angle = freq.astype(dtype) * jnp.asarray(pos, dtype)[..., None] + phase.astype(dtype)
    cos, sin = jnp.cos(angle).astype(x.dtype), jnp.sin(angle).astype(x.dtype)
    re, im = x[..., :half], x[..., half:]
    return jnp.concatenate([re * cos - im * sin, re * sin + im * cos], axis=-1)


@register
@dataclasses.dataclass(frozen=True)
class ComplexOrder(Scheme):
    """Per-word frequency and phase tables [vocab, E/2]; see the module docstring.

    base: wavelength base of the initial frequencies (10000, as sinusoids).
    """

    name = "complex_order"
    base: float = 10000.0

    def __post_init__(self):
        if isinstance(self.base, bool) or not isinstance(self.base, (int, float)) or self.base <= 1:
            self.fail("base", self.base, "a number > 1 (10000 = the sinusoid frequencies)")

    def check(self, dims: Dims, length: int) -> None:
        del length  # any position: a rotation is defined everywhere
        if dims.embed_width % 2:
            raise ConfigError(
                dims.embed_field,
                dims.embed_width,
                "an even embedding width: complex order splits it into real and imaginary halves",
            )
        if dims.vocab_size < 1:
            raise ConfigError(
                "model.vocab_size",
                dims.vocab_size,
                "the token vocabulary size (>= 1): complex order learns a frequency and a "
                "phase per word",
            )

    def init_embed(self, rng: jax.Array) -> Params:
        dims = self.bound_dims
        del rng  # deterministic init (sinusoid frequencies, zero phase)
        half = dims.embed_width // 2
        inv_freq = self.base ** (-np.arange(half, dtype=np.float64) / half)
        freq = jnp.broadcast_to(jnp.asarray(inv_freq, jnp.float32), (dims.vocab_size, half))
        return {"freq": jnp.array(freq), "phase": jnp.zeros((dims.vocab_size, half), jnp.float32)}

    def embed(self, params: Params, x: jax.Array, pos: jax.Array, ids: jax.Array) -> jax.Array:
        # Ids outside the vocabulary get NaN frequencies (never a clamped, wrong word).
        freq = take_rows(params["freq"], ids)
        phase = take_rows(params["phase"], ids)
        return complex_order_embedding(x, pos, freq, phase)
