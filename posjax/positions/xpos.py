"""xPos (Sun et al. 2022): RoPE with a per-pair exponential scale on q and its inverse on k.

Split from rotary.py (which holds the rotation itself and RoPE's scalings) to keep each file
to one job.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from posjax.positions.base import Dims, Scheme
from posjax.positions.registry import register
from posjax.positions.rotary import apply_rotary, check_even, rope_inv_freq

__all__ = ["xpos_scale", "XPos"]


# -- xPos ------------------------------------------------------------------------------------


def xpos_scale(positions: jax.Array, dim: int, scale_base: float = 512.0, gamma: float = 0.4):
    """xPos per-pair scale zeta_i**(n/scale_base) [..., L, dim/2] float32, n = positions.

    zeta_i = (2i + gamma*dim) / ((1 + gamma)*dim) in (0, 1): microsoft/torchscale
    `XPOS.scale = (arange(0, head_dim, 2) + 0.4*head_dim) / (1.4*head_dim)`. Queries are
    multiplied by it and keys by its inverse (`xpos_scale(-positions)`), so q_i . k_j carries
    zeta**((i-j)/scale_base): a decay with distance for keys j <= i.
    """
    zeta = (np.arange(0, dim, 2) + gamma * dim) / ((1 + gamma) * dim)
    log_zeta = jnp.asarray(np.log(zeta), jnp.float32)
    pos = jnp.asarray(positions).astype(jnp.float32)[..., None]
    return jnp.exp(pos / scale_base * log_zeta)


# float32 holds exp(+-87); keep a margin for the magnitudes of q and k themselves.
_XPOS_MAX_LOG_SCALE = 80.0


@register
@dataclasses.dataclass(frozen=True)
class XPos(Scheme):
    """xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE (interleaved, as
    torchscale) plus the per-dim exponential scale of `xpos_scale` on q and its inverse on k.

    CAUSAL ONLY: for a key after the query (j > i) the factor zeta**((i-j)/scale_base) grows
    without bound instead of decaying, so `check` rejects bidirectional models.

    Positions are used as given (torchscale centres them on the sequence, which only helps
    float range); `check` rejects lengths where zeta_0**(+-n/scale_base) leaves float32.
    """

    name: ClassVar[str] = "xpos"
    causal_only: ClassVar[str] = (
        "its scale zeta**((i-j)/scale_base) decays for keys before the query but blows up "
        "for keys after it, so logits depend on i-j only for j <= i; use 'rope' for "
        "bidirectional encoders")

    base: float = 10000.0
    interleaved: bool = True
    scale_base: float = 512.0
    gamma: float = 0.4

    def __post_init__(self):
        if not self.base > 1:
            self.fail("base", self.base, "a number > 1")
        if not self.scale_base > 0:
            self.fail("scale_base", self.scale_base, "a number > 0")
        if not self.gamma > 0:
            self.fail("gamma", self.gamma, "a number > 0 (zeta_0 = gamma/(1+gamma))")

    def max_length(self) -> int:
        """Largest position + 1 whose scale stays well inside float32."""
        log_zeta0 = math.log((1 + self.gamma) / self.gamma)
        return int(_XPOS_MAX_LOG_SCALE * self.scale_base / log_zeta0)

    def rotate(self, params, q, k, q_pos, k_pos):
        del params
        dim = q.shape[-1]
        inv_freq = rope_inv_freq(dim, self.base)
        up = xpos_scale(q_pos, dim, self.scale_base, self.gamma)
        down = xpos_scale(-jnp.asarray(k_pos), dim, self.scale_base, self.gamma)
        q = apply_rotary(q, q_pos, inv_freq, interleaved=self.interleaved, scale=up)
        k = apply_rotary(k, k_pos, inv_freq, interleaved=self.interleaved, scale=down)
        return q, k

    def check(self, dims: Dims, length: int) -> None:
        super().check(dims, length)  # causal models only
        check_even(dims.head_dim, self.name)
        if length > self.max_length():
            self.fail(
                "scale_base",
                self.scale_base,
                f"large enough for length {length}: zeta**(n/scale_base) leaves float32 past "
                f"length {self.max_length()} (grows linearly with scale_base)",
            )

