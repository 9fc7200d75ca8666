"""ReRoPE and leaky ReRoPE (Su 2023, https://kexue.fm/archives/9708, bojone/rerope).

Both keep plain RoPE for keys within `window` w of the query and squash longer distances so
that no relative position beyond ~w is ever seen at inference time:

  relative position r = i - j (query i, key j), |r| < w:  r                    (plain RoPE)
  ReRoPE, |r| >= w:                                         sign(r) * w          (clamped)
  leaky ReRoPE, |r| >= w:                                   sign(r) * (w + (|r| - w)/k)

A clamped or fractional relative position is not a rotation of q and k by their own positions,
so these schemes use the `scores` hook: it receives UNROTATED q, k and returns the raw logits of
one tile, built from a few rotated products of that tile and a per-element select by the tile's
relative distances. Nothing larger than the tile's [Lq, Lk] is formed.

Tile-wise formulation (R(a) = rotation by a*theta; logit of positions (a, b) = R(a)q . R(b)k,
which depends on a - b only):
  near                 R(i)q . R(j)k                             r = i - j
  ReRoPE, far left     R(w)q . k                                 r = w        (j <= i - w)
  ReRoPE, far right    R(-w)q . k                                r = -w       (j >= i + w)
  leaky, far left      R(i/k + w(1-1/k))q . R(j/k)k              r = w + (i-j-w)/k
  leaky, far right     R(i/k - w(1-1/k))q . R(j/k)k              r = -(w + (j-i-w)/k)
bojone's patches are causal (only the far-left branch exists there); bidirectional encoders get
the mirrored far-right branch above, so logits stay symmetric functions of the squashed
distance. At |r| == w every branch gives the same relative position, so the select boundary
(bojone: near iff |r| < w) is continuous.

bojone's patches also multiply queries by max(1, log(i+1)/log(train_length)); that is a separate
option in posjax (`attend(..., logn_length=...)`), not part of these schemes.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import jax
import jax.numpy as jnp

from posjax.positions.base import Dims, Scheme
from posjax.positions.registry import register
from posjax.positions.rotary import check_even, apply_rotary, rope_inv_freq

__all__ = ["rerope_scores", "ReRope", "LeakyReRope"]


def _dot(q: jax.Array, k: jax.Array) -> jax.Array:
    """[B, Lq, H, D] x [B, Lk, H, D] -> [B, H, Lq, Lk] float32 (input dtype, f32 accumulate)."""
    return jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)


def rerope_scores(
    q: jax.Array,
    k: jax.Array,
    q_pos: jax.Array,
    k_pos: jax.Array,
    *,
    window: int,
    inv_freq: jax.Array,
    interleaved: bool = True,
    leaky_factor: Optional[float] = None,
) -> jax.Array:
    """Raw (unscaled) ReRoPE logits of one tile: q [B, Lq, H, D], k [B, Lk, H, D] unrotated,
    q_pos [B, Lq], k_pos [B, Lk] int -> [B, H, Lq, Lk] float32. leaky_factor=None is ReRoPE,
    a number k > 1 is leaky ReRoPE. Three products of the tile, one select."""
    rot = lambda x, pos: apply_rotary(x, pos, inv_freq, interleaved=interleaved)  # noqa: E731
    near = _dot(rot(q, q_pos), rot(k, k_pos))
    if leaky_factor is None:
        w = jnp.full(q_pos.shape, window, jnp.int32)
        far_left = _dot(rot(q, w), k)
        far_right = _dot(rot(q, -w), k)
    else:
        qf = q_pos.astype(jnp.float32) / leaky_factor
        offset = window * (1.0 - 1.0 / leaky_factor)
        k_far = rot(k, k_pos.astype(jnp.float32) / leaky_factor)
        far_left = _dot(rot(q, qf + offset), k_far)
        far_right = _dot(rot(q, qf - offset), k_far)
    rel = q_pos[:, None, :, None] - k_pos[:, None, None, :]  # i - j, [B, 1, Lq, Lk]
    return jnp.where(rel >= window, far_left, jnp.where(rel <= -window, far_right, near))


@register
@dataclasses.dataclass(frozen=True)
class ReRope(Scheme):
    """ReRoPE: RoPE inside `window`, relative position clamped to +-window outside.

    Fields: window w (>= 1, 512 as bojone), base, interleaved (pairing as in `Rope`; bojone
    patches Llama, i.e. half-split; posjax defaults to interleaved like `Rope`).
    """

    name: ClassVar[str] = "rerope"

    window: int = 512
    base: float = 10000.0
    interleaved: bool = True

    def __post_init__(self):
        if not (isinstance(self.window, int) and self.window >= 1):
            self.fail("window", self.window, "an int >= 1 (keys closer than it use plain RoPE)")
        if not self.base > 1:
            self.fail("base", self.base, "a number > 1")

    def _leaky(self) -> Optional[float]:
        return None

    def scores(self, params, q, k, q_pos, k_pos):
        del params
        return rerope_scores(
            q,
            k,
            q_pos,
            k_pos,
            window=self.window,
            inv_freq=rope_inv_freq(q.shape[-1], self.base),
            interleaved=self.interleaved,
            leaky_factor=self._leaky(),
        )

    def check(self, dims: Dims, length: int) -> None:
        del length
        check_even(dims.head_dim, self.name)


@register
@dataclasses.dataclass(frozen=True)
class LeakyReRope(ReRope):
    """Leaky ReRoPE: beyond `window`, relative position w + (|i-j| - w)/leaky_factor.

    leaky_factor k > 1 (bojone's `scaling_factor`, 16 there): the far region is position
    interpolation by 1/k, continued from distance w; k -> infinity recovers ReRoPE.
    """

    name: ClassVar[str] = "leaky_rerope"

    leaky_factor: float = 16.0

    def __post_init__(self):
        super().__post_init__()
        if not self.leaky_factor > 1:
            self.fail("leaky_factor", self.leaky_factor, "a number > 1 (far steps count 1/k)")

    def _leaky(self) -> Optional[float]:
        return float(self.leaky_factor)
