"""HoPE: RoPE with its low-frequency pairs made position-free (Chen et al. 2024, "HoPE: A
Novel Positional Encoding Without Long-Term Decay for Enhanced Context Awareness and
Extrapolation", ACL 2025).

Chen et al. trace RoPE's U-shaped attention and its failure past the training length to the
pairs that never complete a turn within the training window: their angle n * theta_i stays
on one arc of the circle for every trained position, so the model learns a slow trend in
them (long-term decay, a shortcut) that breaks once positions leave that arc. HoPE replaces
those pairs with position-independent ones and keeps only the high frequencies, every one
of which the model has seen through whole periods.

Here pair i keeps theta_i = base**(-2i/R) when its wavelength 2 pi / theta_i is at most the
training length T (it turns at least once within the trained positions) and gets frequency
0 otherwise: an identity rotation, so those dims enter q . k as plain content, the same at
every position. Everything else is RoPE (`rotary.Rope`: pairing, partial rotation, the value
path); `trained_length` (None: the model's max_length when it is built, then kept fixed) sets
T. With theta_0 = 1 the fastest pair always turns within T >= 7 positions, so a model keeps
at least one positional pair.

No public code by the authors was found; the test writes the rule above out in numpy.
Kept pairs all rotate at RoPE's speeds, so logits stay a function of i - j only. Nothing to
extend: every kept frequency already went through whole turns in training ('as_is').
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Optional

import jax
import jax.numpy as jnp
import numpy as np

from posjax.positions.base import Dims
from posjax.positions.extension import AS_IS
from posjax.positions.registry import register
from posjax.positions.rotary import Rope

# The fastest pair (theta_0 = 1) completes a turn within 2 pi < 7 positions.
MIN_TRAINED_LENGTH = 7


def hope_keep(inv_freq: np.ndarray, trained_length: int) -> np.ndarray:
    """Which pairs keep their frequency: wavelength 2 pi / theta_i <= T (a whole turn seen)."""
    return 2 * math.pi / np.asarray(inv_freq, np.float64) <= trained_length


@register
@dataclasses.dataclass(frozen=True)
class Hope(Rope):
    """RoPE whose pairs with a wavelength past `trained_length` turn by angle 0; see the
    module docstring. Fields: those of rope, and trained_length (T; None = model.max_length
    when bound)."""

    name: ClassVar[str] = "hope"
    extend_methods: ClassVar[dict] = {}
    default_extension: ClassVar[str] = AS_IS
    extend_refusal: ClassVar[str] = "position '{scheme}' has no extension '{method}'"

    trained_length: Optional[int] = None

    def __post_init__(self):
        super().__post_init__()
        T = self.trained_length
        if T is not None and (isinstance(T, bool) or not isinstance(T, (int, np.integer))
                              or T < MIN_TRAINED_LENGTH):
            self.fail("trained_length", T, f"None (= model.max_length) or an int >= "
                      f"{MIN_TRAINED_LENGTH} (the fastest pair turns once in 2 pi positions)")

    def bound_values(self, dims: Dims) -> dict:
        return {"trained_length": dims.max_length} if self.trained_length is None else {}

    def kept_fields(self) -> dict:
        """A longer model keeps the pairs chosen at the trained length."""
        T = self.bound_dims.max_length if self.trained_length is None else self.trained_length
        return {"trained_length": int(T)}

    def check(self, dims: Dims, length: int) -> None:
        super().check(dims, length)
        if self.trained_length is None and dims.max_length < MIN_TRAINED_LENGTH:
            self.fail("trained_length", None, f"an int >= {MIN_TRAINED_LENGTH} when "
                      f"model.max_length = {dims.max_length} is shorter than the fastest "
                      "pair's wavelength")

    def kept_pairs(self, head_dim: int) -> np.ndarray:
        """[R/2] bool: the pairs that keep their RoPE frequency (the bound T)."""
        dim = self.rotary_size(head_dim)
        theta = self.base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
        return hope_keep(theta, self.bound_dims.max_length if self.trained_length is None
                         else self.trained_length)

    def inv_freq(self, head_dim: int, k_pos: Optional[jax.Array] = None) -> jax.Array:
        keep = jnp.asarray(self.kept_pairs(head_dim))
        return jnp.where(keep, super().inv_freq(head_dim, k_pos), 0.0)
