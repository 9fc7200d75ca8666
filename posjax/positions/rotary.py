"""Rotary position embeddings: RoPE (Su et al. 2021) with its scalings (xPos: xpos.py).

RoPE rotates each pair of query/key dims by the angle n*theta_i, so that
q_i . k_j = q^T R((j-i) theta) k depends on positions only through i - j.

Two pairings of dims are in use, and checkpoints are NOT interchangeable between them:
  interleaved=True   pairs (x0,x1), (x2,x3), ...      RoFormer, bert4keras, HF RoFormer, xPos
  interleaved=False  pairs (x_i, x_{i+R/2}) "half"    GPT-NeoX, flaxformer, MaxText, HF Llama
Both rotate a pair (a, b) to (a cos - b sin, b cos + a sin). They are related by a fixed
permutation of dims (see `half_to_interleaved`).

Angles are computed in float32 whatever the input dtype (bfloat16 has 8 mantissa bits and
rounds position 257 to 256); the rotation itself runs in float32 too (it is elementwise and
fuses), and the output is cast back to x.dtype.

Building blocks, reused by the scalings, ReRoPE (`rerope.py`) and the attention kernel:
  rope_inv_freq(dim, base)                   -> theta [dim/2]
  rope_angles(positions, inv_freq)           -> positions * theta, float32
  rotate_by_angles(x, angles, interleaved)   rotates the first 2*angles.shape[-1] dims of x
  apply_rotary(x, positions, inv_freq, ...)  the above for x [..., L, H, D]
  apply_rope(x, positions, base, interleaved) plain RoPE
Partial rotation falls out of the shapes: with inv_freq of size R/2 < D/2, the first R dims
are rotated and the rest pass through unchanged (GPT-NeoX `rotary_pct`, HF
`partial_rotary_factor`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Optional

import jax
import jax.numpy as jnp
import numpy as np

from posjax.errors import ConfigError
from posjax.positions import rope_scaling
from posjax.positions.base import Dims, Scheme
from posjax.positions.extension import Extension, ExtendSettings, NotApplicable
from posjax.positions.registry import register
from posjax.positions.rope_scaling import SCALINGS, rope_inv_freq

__all__ = [
    "apply_rope",
    "apply_rotary",
    "half_to_interleaved",
    "rope_angles",
    "rope_inv_freq",
    "rotate_by_angles",
    "Rope",
]


# -- building blocks -------------------------------------------------------------------------


def rope_angles(positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
    """Angles positions * theta in float32: [..., L] x [R/2] (or [..., R/2]) -> [..., L, R/2].

    Positions may be fractional (leaky ReRoPE). A per-row inv_freq [..., R/2] (dynamic NTK)
    has the leading dims of `positions` without the length axis.
    """
    pos = jnp.asarray(positions).astype(jnp.float32)[..., None]
    inv_freq = jnp.asarray(inv_freq, jnp.float32)
    if inv_freq.ndim > 1:
        inv_freq = inv_freq[..., None, :]
    return pos * inv_freq


def rotate_by_angles(
    x: jax.Array, angles: jax.Array, *, interleaved: bool = True, scale: Optional[jax.Array] = None
) -> jax.Array:
    """Rotate the first R = 2*angles.shape[-1] dims of x [..., D]; dims R.. pass through.

    `angles` broadcasts against x[..., :R/2]. `scale` (same shape as angles, optional)
    multiplies both dims of each rotated pair (xPos). Computed in float32 (float64 if x is).
    """
    half = angles.shape[-1]
    rot, dim = 2 * half, x.shape[-1]
    if rot > dim:
        raise ConfigError("position.rotary_dim", rot, f"an even number <= the head dim {dim}")
    dtype = jnp.promote_types(x.dtype, jnp.float32)
    cos, sin = jnp.cos(angles).astype(dtype), jnp.sin(angles).astype(dtype)
    if scale is not None:
        cos, sin = cos * scale, sin * scale
    # cos and sin through one transposed table: XLA:CPU then computes them once per position,
    # where it otherwise recomputes them inside the rotation's fusion for every head.
    cos, sin = jnp.moveaxis(jnp.stack([cos, sin], axis=-1), -1, 0)
    xr = x[..., :rot].astype(dtype)
    if interleaved:
        a, b = xr[..., 0::2], xr[..., 1::2]
    else:
        a, b = xr[..., :half], xr[..., half:]
    ra, rb = a * cos - b * sin, b * cos + a * sin
    if interleaved:
        out = jnp.stack([ra, rb], axis=-1).reshape(ra.shape[:-1] + (rot,))
    else:
        out = jnp.concatenate([ra, rb], axis=-1)
    out = out.astype(x.dtype)
    if rot < dim:
        out = jnp.concatenate([out, x[..., rot:]], axis=-1)
    return out


def apply_rotary(
    x: jax.Array,
    positions: jax.Array,
    inv_freq: jax.Array,
    *,
    interleaved: bool = True,
    scale: Optional[jax.Array] = None,
) -> jax.Array:
    """Rotate x [..., L, H, D] by positions [..., L] (int or float) with given frequencies.

    inv_freq [R/2] (or [..., R/2] per leading row); scale [..., L, R/2] optional (xPos).
    The scalings only change `inv_freq`, so this is the one rotation everything shares.
    """
    angles = rope_angles(positions, inv_freq)[..., None, :]  # heads axis
    if scale is not None:
        scale = scale[..., None, :]
    return rotate_by_angles(x, angles, interleaved=interleaved, scale=scale)


def check_even(dim: int, name: str) -> None:
    if dim % 2:
        raise ConfigError(
            "model.head_dim", dim, f"an even number: position '{name}' rotates pairs of dims"
        )


def apply_rope(
    x: jax.Array, positions: jax.Array, *, base: float = 10000.0, interleaved: bool = True
) -> jax.Array:
    """Plain RoPE on x [..., length, heads, dim] at int positions [..., length]; x.dtype out."""
    check_even(x.shape[-1], "rope")
    return apply_rotary(x, positions, rope_inv_freq(x.shape[-1], base), interleaved=interleaved)


def half_to_interleaved(dim: int) -> np.ndarray:
    """Permutation p with x_half[..., p] laid out interleaved: the pair (i, i+dim/2) of the
    half-split convention becomes the pair (2i, 2i+1). So
    apply_rope(x[..., p], interleaved=True) == apply_rope(x, interleaved=False)[..., p]."""
    half = dim // 2
    return np.stack([np.arange(half), np.arange(half) + half], axis=-1).reshape(-1)


# -- RoPE with scalings ----------------------------------------------------------------------


def _validate_rotary_size(scheme: Scheme) -> None:
    """Shared checks of rotary_dim / rotary_fraction (static, before any compile)."""
    if scheme.rotary_dim is not None and scheme.rotary_fraction is not None:
        scheme.fail("rotary_dim", scheme.rotary_dim, "unset when rotary_fraction is set (give one)")
    if scheme.rotary_dim is not None and (scheme.rotary_dim < 2 or scheme.rotary_dim % 2):
        scheme.fail("rotary_dim", scheme.rotary_dim, "an even number >= 2 (dims rotate in pairs)")
    if scheme.rotary_fraction is not None and not 0 < scheme.rotary_fraction <= 1:
        scheme.fail("rotary_fraction", scheme.rotary_fraction, "a fraction in (0, 1]")


@register
@dataclasses.dataclass(frozen=True)
class Rope(Scheme):
    """RoPE, optionally partial and/or scaled for length extension (see rope_scaling.py).

    Fields:
      base            theta base (10000)
      interleaved     True: (x0,x1),(x2,x3)... RoFormer; False: (x_i, x_{i+R/2}) GPT-NeoX
      rotary_dim      rotate only the first rotary_dim dims (even, <= head dim); None = all
      rotary_fraction alternatively, rotate int(head_dim * fraction) dims (HF partial_rotary_factor)
      scaling         one of rope_scaling.SCALINGS ('none' = plain RoPE); the post-hoc ones
                      are also this scheme's length-extension methods (`extend`)
      factor          s >= 1, target length / pretraining length
      original_length the PRETRAINING length L (dynamic_ntk, yarn, llama3, longrope)
      beta_fast, beta_slow  YaRN ramp bounds in rotations (32, 1)
      attention_factor      YaRN / LongRoPE temperature override (None = the paper's default);
                      like the references it multiplies cos and sin, so logits grow by its square
      low_freq_factor, high_freq_factor  llama3 wavelength edges L/low and L/high (1, 4)
      short_factor, long_factor  longrope per-pair factors, R/2 numbers each: short while the
                      current length n = max(k_pos) + 1 <= L, long beyond (per batch row)
      on_values       also rotate v by the key's position and the output back by the query's
                      (Su's note on RoPE: out_i = sum_j p_ij R(j - i) v_j, so the value path
                      is relative too); same frequencies and rotated dims as q and k

    proportional (p-RoPE): rotary_dim / rotary_fraction say how many dims carry a frequency
    (HF `partial_rotary_factor`); the frequencies keep the full head dim in their exponent and
    the rest are 0, so `rotary_size` is the whole head dim (every pair is "rotated", most of
    the dropped ones by angle 0), which matches HF's pairing in both conventions.

    dynamic_ntk: the current length n is derived from the key positions, per batch row:
    n = max(k_pos) + 1 (HF uses max(position_ids) + 1). It is therefore traced, works under
    jit, and makes `rotate` depend on the whole key-position row: a kernel must compute
    `inv_freq(head_dim, k_pos)` once on full positions and rotate tiles with `apply_rotary`.
    Padding positions should not exceed the real ones (the data pipeline pads with 0).
    """

    name: ClassVar[str] = "rope"
    extend_methods: ClassVar[dict] = {
        **rope_scaling.POST_HOC,
        "rerope": "ReRoPE: plain RoPE within a window w (default T//2), distances clamped to w",
        "leaky_rerope": "leaky ReRoPE: beyond w distances squashed by 1/k, k = max(2, (L-w)/(T-w))",
    }
    default_extension: ClassVar[str] = "dynamic_ntk"  # unchanged up to the original length
    extend_refusal: ClassVar[str] = (
        "'{method}' rescales rotary positions; position '{scheme}' is not 'rope'")

    base: float = 10000.0
    interleaved: bool = True
    rotary_dim: Optional[int] = None
    rotary_fraction: Optional[float] = None
    scaling: str = "none"
    factor: float = 1.0
    original_length: Optional[int] = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: Optional[float] = None
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    short_factor: Optional[tuple] = None
    long_factor: Optional[tuple] = None
    # not `values`: that name is ConfigDict.values(), so config.position.values would be
    # the method, not the field
    on_values: bool = False

    def __post_init__(self):
        if not self.base > 1:
            self.fail("base", self.base, "a number > 1")
        if not isinstance(self.on_values, bool):
            self.fail("on_values", self.on_values, "True or False (rotate the value path too)")
        _validate_rotary_size(self)
        if self.scaling not in SCALINGS:
            self.fail("scaling", self.scaling, f"one of {', '.join(SCALINGS)}")
        if self.scaling == "none" and self.factor != 1:
            self.fail("factor", self.factor, "1 when scaling='none' (set a scaling to use factor)")
        if not self.factor >= 1:
            self.fail("factor", self.factor, "a number >= 1 (target length / pretraining length)")
        if self.scaling in rope_scaling.NEEDS_ORIGINAL_LENGTH:
            if self.original_length is None or self.original_length < 1:
                self.fail(
                    "original_length",
                    self.original_length,
                    f"the pretraining length (an int >= 1), required by scaling='{self.scaling}'",
                )
        if self.scaling == "yarn" and not self.beta_fast > self.beta_slow > 0:
            self.fail("beta_fast", (self.beta_fast, self.beta_slow), "beta_fast > beta_slow > 0")
        if self.scaling == "llama3" and not self.high_freq_factor > self.low_freq_factor > 0:
            self.fail("high_freq_factor", (self.low_freq_factor, self.high_freq_factor),
                      "high_freq_factor > low_freq_factor > 0 (given as (low, high))")
        for field in ("short_factor", "long_factor"):
            self._check_factors(field)
        if self.attention_factor is not None and not self.attention_factor > 0:
            self.fail("attention_factor", self.attention_factor, "a number > 0 or None")

    def _check_factors(self, field: str) -> None:
        """longrope's factor lists: required for it, forbidden elsewhere, stored as tuples of
        positive floats (a frozen dataclass must hash; configs hand in lists)."""
        value = getattr(self, field)
        if self.scaling != "longrope":
            if value is not None:
                self.fail(field, value, "unset unless scaling='longrope'")
            return
        try:
            factors = tuple(float(f) for f in value)
        except (TypeError, ValueError):
            factors = ()
        if not factors or not all(f > 0 for f in factors):
            self.fail(field, value, "a list of numbers > 0, one per rotated pair (rotated dims/2),"
                      " required by scaling='longrope'")
        object.__setattr__(self, field, factors)

    # -- sizes and frequencies --------------------------------------------------------------
    def rotated_pairs(self, head_dim: int) -> int:
        """Pairs with a nonzero frequency: R/2, or for proportional HF's
        int(partial_rotary_factor * head_dim // 2)."""
        if self.scaling != "proportional":
            return self._partial_size(head_dim) // 2
        if self.rotary_dim is not None:
            return self.rotary_dim // 2
        if self.rotary_fraction is not None:
            return int(self.rotary_fraction * head_dim // 2)
        return head_dim // 2

    def rotary_size(self, head_dim: int) -> int:
        """Number of rotated dims R for this head dim (all of them for proportional, whose
        dropped pairs turn by angle 0)."""
        if self.scaling == "proportional":
            return head_dim
        return self._partial_size(head_dim)

    def _partial_size(self, head_dim: int) -> int:
        if self.rotary_dim is not None:
            return self.rotary_dim
        if self.rotary_fraction is not None:
            return int(head_dim * self.rotary_fraction)
        return head_dim

    def inv_freq(self, head_dim: int, k_pos: Optional[jax.Array] = None) -> jax.Array:
        """Scaled inverse frequencies [R/2] float32 ([B, R/2] for dynamic_ntk, which needs
        the key positions k_pos [B, Lk] to know the current length)."""
        dim, s = self.rotary_size(head_dim), self.factor
        if self.scaling == "linear":
            return rope_scaling.linear_inv_freq(dim, self.base, s)
        if self.scaling == "ntk":
            return rope_inv_freq(dim, rope_scaling.ntk_base(self.base, s, dim))
        if self.scaling == "dynamic_ntk":
            if k_pos is None:
                raise ValueError("dynamic_ntk frequencies need the key positions k_pos")
            seq_len = jnp.max(k_pos, axis=-1) + 1
            base = rope_scaling.dynamic_ntk_base(self.base, s, dim, seq_len, self.original_length)
            return rope_inv_freq(dim, base)
        if self.scaling == "yarn":
            return rope_scaling.yarn_inv_freq(
                dim, self.base, s, self.original_length, self.beta_fast, self.beta_slow
            )
        if self.scaling == "llama3":
            return rope_scaling.llama3_inv_freq(dim, self.base, s, self.original_length,
                                                self.low_freq_factor, self.high_freq_factor)
        if self.scaling == "longrope":
            if k_pos is None:
                raise ValueError("longrope frequencies need the key positions k_pos")
            # HF longrope_frequency_update: long factors once max(position) + 1 > L
            long = (jnp.max(k_pos, axis=-1) + 1 > self.original_length)[..., None]
            factors = jnp.where(long, jnp.asarray(self.long_factor, jnp.float32),
                                jnp.asarray(self.short_factor, jnp.float32))
            return rope_scaling.longrope_inv_freq(dim, self.base, factors)
        if self.scaling == "proportional":
            return rope_scaling.proportional_inv_freq(
                head_dim, self.base, self.rotated_pairs(head_dim), s)
        return rope_inv_freq(dim, self.base)

    def mscale(self) -> float:
        """YaRN / LongRoPE attention factor (1 for every other scaling)."""
        if self.scaling not in ("yarn", "longrope"):
            return 1.0
        if self.attention_factor is not None:
            return self.attention_factor
        if self.scaling == "longrope":
            return rope_scaling.longrope_attention_factor(self.factor, self.original_length)
        return rope_scaling.yarn_mscale(self.factor)

    # -- length extension -------------------------------------------------------------------
    def extend(self, method: str, length: int, trained_length: Optional[int] = None,
               settings: ExtendSettings = ExtendSettings()) -> Extension:
        """A scaling with original_length = T and factor s (default max(1, L/T); dynamic NTK
        1, i.e. base * (n/T)**(d/(d-2)) from the running length n), global layers only; or
        ReRoPE / leaky ReRoPE with window w, which rotate every dim of q and k and no value."""
        if method not in self.extend_methods:
            return super().extend(method, length, trained_length, settings)
        T = self.bound_dims.max_length if trained_length is None else trained_length
        if method in rope_scaling.POST_HOC:
            s = settings.factor if settings.factor else max(1.0, length / T)
            if method == "dynamic_ntk" and not settings.factor:
                s = 1.0
            fields = {"scaling": method, "factor": float(s)}
            if method in rope_scaling.NEEDS_ORIGINAL_LENGTH:
                fields["original_length"] = T
            return Extension(fields, details={"factor": float(s), "original_length": T},
                             global_only=True)
        if self.rotary_dim is not None or self.rotary_fraction is not None:
            raise NotApplicable(f"{method} rotates every dim; this model rotates only part of them")
        if self.on_values:
            raise NotApplicable(
                f"{method} does not rotate values; this model does (on_values=True)")
        w = settings.window or max(1, T // 2)
        fields = {"name": method, "window": int(w), "base": float(self.base),
                  "interleaved": bool(self.interleaved)}
        details = {}
        if method == "leaky_rerope":
            k = settings.leaky_factor or max(2.0, (length - w) / max(T - w, 1))
            fields["leaky_factor"] = details["leaky_factor"] = float(k)
        details["window"] = int(w)
        return Extension(fields, replace=True, details=details)

    def check_original(self) -> None:
        if self.scaling != "none":
            self.fail("scaling", self.scaling, "'none' before extend() (extend the original "
                      "model, not an extended one)")

    # -- hooks ------------------------------------------------------------------------------
    def rotate(self, params, q, k, q_pos, k_pos):
        del params
        inv_freq = self.inv_freq(q.shape[-1], k_pos)
        q = apply_rotary(q, q_pos, inv_freq, interleaved=self.interleaved)
        k = apply_rotary(k, k_pos, inv_freq, interleaved=self.interleaved)
        return q, k

    def rotate_values(self, params, x, pos, k_pos, inverse):
        """v by +key positions, the output by -query positions (on_values=True; else x)."""
        del params
        if not self.on_values:
            return x
        pos = -jnp.asarray(pos) if inverse else pos
        return apply_rotary(x, pos, self.inv_freq(x.shape[-1], k_pos),
                            interleaved=self.interleaved)

    @property
    def hooks(self) -> tuple[str, ...]:
        names = super().hooks
        return names if self.on_values else tuple(n for n in names if n != "rotate_values")

    def logit_scale(self, head_dim: int) -> float:
        """1/sqrt(D), times mscale**2 for YaRN (the references scale cos and sin, i.e. both
        q and k, by mscale). With partial rotation the references scale only the rotated
        dims; posjax scales the whole logit, a deliberate simplification."""
        return self.mscale() ** 2 / math.sqrt(head_dim)

    def check(self, dims: Dims, length: int) -> None:
        del length
        check_even(dims.head_dim, self.name)
        dim = self.rotary_size(dims.head_dim)
        if dim > dims.head_dim or dim % 2 or dim < 2:
            field = "rotary_dim" if self.rotary_dim is not None else "rotary_fraction"
            value = self.rotary_dim if self.rotary_dim is not None else self.rotary_fraction
            self.fail(
                field, value, f"an even number of rotated dims in [2, head dim {dims.head_dim}]"
                f" (this gives {dim})"
            )
        if self.scaling in ("ntk", "dynamic_ntk") and dim <= 2:
            self.fail("rotary_dim", dim, f"> 2 for scaling='{self.scaling}' (base**(d/(d-2)))")
        pairs = self.rotated_pairs(dims.head_dim)
        if not 1 <= pairs <= dims.head_dim // 2:
            field = "rotary_dim" if self.rotary_dim is not None else "rotary_fraction"
            self.fail(field, getattr(self, field), f"between 1 and {dims.head_dim // 2} "
                      f"frequency pairs of head dim {dims.head_dim} (this gives {pairs})")
        if self.scaling == "longrope":
            for field in ("short_factor", "long_factor"):
                if len(getattr(self, field)) != pairs:
                    self.fail(field, list(getattr(self, field)),
                              f"{pairs} numbers, one per rotated pair ({2 * pairs} rotated dims "
                              f"of head dim {dims.head_dim}), not {len(getattr(self, field))}")
