"""Resonance RoPE: RoPE with every wavelength rounded to a whole number of positions (Wang et
al., Findings of ACL 2024, "Resonance RoPE: Improving Context Length Generalization of Large
Language Models"; code: the paper's `ResonanceRotaryEmbedding` and its NTK and YaRN
variants).

A pair whose wavelength lambda_i = 2 pi / theta_i is not an integer meets integer positions
at new phases every turn, so a position past the trained ones can sit at an angle no trained
position had (the paper's feature gap). With lambda_i rounded, theta~_i = 2 pi / round(lambda_i),
the angles repeat exactly every round(lambda_i) positions: each pair whose wavelength is
shorter than the training length (the paper's pre-critical dims) has seen every angle it will
ever take. Longer wavelengths move by less than half a position; the authors' code rounds
them too, which is the default here (`rounded_length=None`); `rounded_length=T` rounds only
the wavelengths <= T, the dims the paper's argument is about.

The rounding acts on the frequencies the RoPE scaling gives (`rotary.Rope`), so every field
and length-extension method of `rope` applies and composes, as in the paper:
`eval.py --methods=yarn` on a resonance run is Resonance YaRN (YaRN's blended frequencies,
then rounded, logits times YaRN's temperature); likewise NTK. The authors' linear variant
divides the positions after rounding instead, so its wavelengths are s * round(lambda), not
round(s * lambda). Frequency 0 (p-RoPE's dropped pairs) stays 0.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Optional

import jax
import jax.numpy as jnp
import numpy as np

from posjax.positions import rope_scaling
from posjax.positions.registry import register
from posjax.positions.rotary import Rope


def round_wavelengths(inv_freq: jax.Array, rounded_length: Optional[int] = None) -> jax.Array:
    """theta -> 2 pi / round(2 pi / theta) for the wavelengths <= rounded_length (every one
    when None); frequency 0 (no rotation) and the longer wavelengths unchanged. float32."""
    theta = jnp.asarray(inv_freq, jnp.float32)
    moving = theta > 0
    wavelength = 2 * math.pi / jnp.where(moving, theta, 1.0)
    rounded = jnp.maximum(jnp.round(wavelength), 1.0)
    if rounded_length is not None:
        moving = moving & (wavelength <= rounded_length)
    return jnp.where(moving, 2 * math.pi / rounded, theta)


@register
@dataclasses.dataclass(frozen=True)
class Resonance(Rope):
    """RoPE (any scaling) with its wavelengths rounded to integers; see the module docstring.
    Fields: those of rope, and rounded_length (None: round every wavelength, as the authors'
    code; T: only those <= T)."""

    name: ClassVar[str] = "resonance"
    # The RoPE scalings, each then rounded (Resonance YaRN); ReRoPE would replace the scheme.
    extend_methods: ClassVar[dict] = dict(rope_scaling.POST_HOC)
    default_extension: ClassVar[str] = "yarn"

    rounded_length: Optional[int] = None

    def __post_init__(self):
        super().__post_init__()
        n = self.rounded_length
        if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer))
                              or n < 1):
            self.fail("rounded_length", n, "None (round every wavelength) or an int >= 1 "
                      "(round the wavelengths up to it)")

    def inv_freq(self, head_dim: int, k_pos: Optional[jax.Array] = None) -> jax.Array:
        return round_wavelengths(super().inv_freq(head_dim, k_pos), self.rounded_length)
