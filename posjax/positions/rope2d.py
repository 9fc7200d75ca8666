"""2-D rotary position embeddings for image patches (Heo et al. 2024, "Rotary Position
Embedding for Vision Transformer"). Positions are (row, column) pairs, [B, L, 2].

RoPE rotates every pair t of query/key dims by an angle a_t(p) that is linear in the position,
so q_i . k_j sees the positions only through a_t(p_j) - a_t(p_i) = a_t(p_j - p_i). In two
dimensions the angle of pair t is linear in both coordinates:

    a_t(r, c) = r * f_row[t] + c * f_col[t]

and q_i . k_j depends on the positions only through (dr, dc) = (r_j - r_i, c_j - c_i).

  mode='axial'   the first half of the pairs turn with the row, the second half with the
                 column: f_row = (w, 0), f_col = (0, w), w_s = base**(-s / (D/4)),
                 s = 0 .. D/4 - 1 (so D must be a multiple of 4). Fixed, no parameters.
  mode='mixed'   f_row, f_col are learned per layer, per head and per pair: parameters
                 `freqs` [2, H, D/2] (row, column). Each head starts on a direction phi_h:
                 pair s and pair s + D/4 share the magnitude w_s and point along phi_h and
                 phi_h + pi/2, i.e. f_row = w (cos phi_h, -sin phi_h), f_col = w (sin phi_h,
                 cos phi_h). phi_h is drawn uniformly in [0, 2 pi) (rotate_init=True, as the
                 paper) or 0, where mixed starts exactly as axial.

Heo et al. use base 100 for axial and 10 for mixed (ViT grids are small); `base=None` picks
those. Pairing of dims follows RoPE's two conventions (`interleaved`, see rotary.py); the
angles and the rotation are float32 whatever the input dtype.

A 2-D scheme has no order between positions: it refuses causal models, and attention refuses
masks that compare positions (causal, sliding windows) for it. Not fused in the Pallas kernel
(an explicit 'kernel' falls back to 'chunked', which rotates whole q and k once).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Optional

import jax
import jax.numpy as jnp

from posjax.errors import ConfigError
from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.registry import register
from posjax.positions.rope_scaling import rope_inv_freq
from posjax.positions.rotary import rotate_by_angles

MODES = ("axial", "mixed")
DEFAULT_BASE = {"axial": 100.0, "mixed": 10.0}  # Heo et al. 2024


def axial_freqs(head_dim: int, base: float) -> tuple[jax.Array, jax.Array]:
    """(f_row, f_col), each [D/2] float32: rows turn the first D/4 pairs, columns the rest."""
    w = rope_inv_freq(head_dim // 2, base)  # base**(-s / (D/4)), D/4 of them
    zero = jnp.zeros_like(w)
    return jnp.concatenate([w, zero]), jnp.concatenate([zero, w])


def mixed_init(rng: jax.Array, num_heads: int, head_dim: int, base: float,
               rotate: bool) -> jax.Array:
    """Initial learned frequencies [2, H, D/2] (row, column); see the module docstring."""
    w = rope_inv_freq(head_dim // 2, base)  # [D/4]
    phi = (jax.random.uniform(rng, (num_heads, 1), jnp.float32, 0.0, 2 * math.pi) if rotate
           else jnp.zeros((num_heads, 1), jnp.float32))
    # pair s along phi, pair s + D/4 along phi + pi/2 (orthogonal)
    row = jnp.concatenate([w * jnp.cos(phi), -w * jnp.sin(phi)], axis=-1)
    col = jnp.concatenate([w * jnp.sin(phi), w * jnp.cos(phi)], axis=-1)
    return jnp.stack([row, col])


def grid_angles(pos: jax.Array, f_row: jax.Array, f_col: jax.Array) -> jax.Array:
    """Angles r * f_row + c * f_col in float32. pos [..., L, 2]; frequencies [D/2] (shared by
    the heads) -> [..., L, 1, D/2], or [H, D/2] (per head) -> [..., L, H, D/2]."""
    pos = jnp.asarray(pos).astype(jnp.float32)
    r, c = pos[..., 0, None, None], pos[..., 1, None, None]  # [..., L, 1, 1]
    f_row, f_col = jnp.asarray(f_row, jnp.float32), jnp.asarray(f_col, jnp.float32)
    return r * f_row + c * f_col


@register
@dataclasses.dataclass(frozen=True)
class Rope2d(Scheme):
    """2-D RoPE; see the module docstring. Fields: mode ('axial' | 'mixed'), base (None = 100
    for axial, 10 for mixed), interleaved (pairing of dims, as rope), rotate_init (mixed: a
    random starting direction per head; False starts at axial)."""

    name: ClassVar[str] = "rope2d"
    position_dims: ClassVar[int] = 2

    mode: str = "axial"
    base: Optional[float] = None
    interleaved: bool = True
    rotate_init: bool = True

    def __post_init__(self):
        if self.mode not in MODES:
            self.fail("mode", self.mode, f"one of {', '.join(MODES)}")
        if self.base is None:
            object.__setattr__(self, "base", DEFAULT_BASE[self.mode])
        if isinstance(self.base, bool) or not isinstance(self.base, (int, float)) \
                or not self.base > 1:
            self.fail("base", self.base, "a number > 1 (or None: 100 axial, 10 mixed)")
        for field in ("interleaved", "rotate_init"):
            if not isinstance(getattr(self, field), bool):
                self.fail(field, getattr(self, field), "True or False")

    def check(self, dims: Dims, length: int) -> None:
        del length
        if dims.head_dim % 4:
            raise ConfigError("model.head_dim", dims.head_dim,
                           "a multiple of 4: rope2d splits the rotated pairs between rows "
                           "and columns")
        if dims.causal:
            raise ConfigError("model.causal", True,
                           "False: rope2d positions are (row, column) pairs with no order for "
                           "a causal mask")

    def init_layer(self, rng: jax.Array) -> Params:
        if self.mode != "mixed":
            return {}
        dims = self.bound_dims
        return {"freqs": mixed_init(rng, dims.num_heads, dims.head_dim, self.base,
                                    self.rotate_init)}

    def frequencies(self, params, head_dim: int) -> tuple[jax.Array, jax.Array]:
        """(f_row, f_col): [D/2] each (axial) or [H, D/2] each (mixed, from params)."""
        if self.mode == "mixed":
            freqs = params["freqs"].astype(jnp.float32)
            return freqs[0], freqs[1]
        return axial_freqs(head_dim, self.base)

    def rotate(self, params, q, k, q_pos, k_pos):
        f_row, f_col = self.frequencies(params, q.shape[-1])
        q = rotate_by_angles(q, grid_angles(q_pos, f_row, f_col), interleaved=self.interleaved)
        k = rotate_by_angles(k, grid_angles(k_pos, f_row, f_col), interleaved=self.interleaved)
        return q, k
