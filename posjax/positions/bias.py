"""The linear-bias family: ALiBi, KERPLE and Sandwich (FIRE lives in fire.py).

Every scheme here fills only the `bias(params, q_pos, k_pos) -> [B, H, Lq, Lk] float32` hook.
The bias is a function of one query position and one key position at a time (FIRE also of the
query position alone), so attention may call it per (query block, key block) tile and the
concatenated tiles equal the bias of the whole sequence; no [L, L] array is ever handed in.

Direction. Every bias here depends on the distance |i - j| (i query, j key). The references
are causal and build `tril(i - j)`: 0 above the diagonal, which the causal mask hides. On every
pair a causal mask keeps (j <= i), |i - j| equals i - j, so the symmetric form serves causal
and bidirectional models alike and the hooks need not know `dims.causal`. Only ALiBi offers
the one-sided form explicitly (`symmetric=False`), for a bidirectional model that should not
penalize keys after the query.

Constants. ALiBi and Sandwich learn nothing: their per-head constants follow from the bound
scheme's dims (`scheme.bind(dims)`), so they have no parameters and no optimizer state.

CoPE (Golovneva et al. 2024, "Contextual Position Encoding") is not a bias of position tiles:
its position of key j seen from query i is p_ij = sum_{t=j..i} sigmoid(q_i . k_t), a sum of
content gates over the keys between j and i, some outside the current key block. It lives in
cope.py, through the count_gates and count_logits hooks, whose sums attention carries across
key blocks.
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


# -- shared helpers ----------------------------------------------------------------------


def check_heads(num_heads, field: str = "model.num_heads") -> int:
    """The head count as an int; ConfigError unless it is a positive integer."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)) or num_heads <= 0:
        raise ConfigError(field, num_heads, "a positive integer")
    return int(num_heads)


def abs_distance(q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
    """|i - j| as float32 [B, Lq, Lk] from q_pos [B, Lq] and k_pos [B, Lk] (int).

    The difference is taken in int32 (exact) before the cast; float32 is exact for distances
    below 2**24, far past any length we evaluate.
    """
    return jnp.abs(query_minus_key(q_pos, k_pos)).astype(jnp.float32)


def query_minus_key(q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
    """i - j as int32 [B, Lq, Lk] from q_pos [B, Lq] and k_pos [B, Lk] (int)."""
    if q_pos.ndim != 2 or k_pos.ndim != 2:
        raise ConfigError(
            "q_pos/k_pos", (q_pos.shape, k_pos.shape), "int arrays of shape [batch, length]"
        )
    return q_pos.astype(jnp.int32)[:, :, None] - k_pos.astype(jnp.int32)[:, None, :]


def _per_head(values: jax.Array) -> jax.Array:
    """[H] -> [1, H, 1, 1], to broadcast against [B, 1, Lq, Lk]."""
    return values.astype(jnp.float32)[None, :, None, None]


def straight_through_clamp(x: jax.Array, lo: float, hi: Optional[float] = None) -> jax.Array:
    """clip(x, lo, hi) in the forward pass, identity in the backward pass.

    KERPLE's reference projects its parameters in place (`param.data.clamp_(min=eps)`) before
    each forward pass, outside autograd: the value used is clamped and the gradient is the one
    at the clamped value, passed to the parameter unchanged. This straight-through clamp is the
    pure-function equivalent: the gradient keeps flowing even while a parameter sits below the
    bound, so an optimizer can bring it back. (Unlike the reference, the stored parameter is
    not overwritten, so it may sit below eps while the value used stays at eps.)
    """
    # x - stop_gradient(x) is exactly 0 forward and carries gradient 1 backward; written this
    # way (not x + sg(clip - x)) so the forward value is the clipped number to the last bit.
    return jax.lax.stop_gradient(jnp.clip(x, lo, hi)) + (x - jax.lax.stop_gradient(x))


# -- ALiBi ------------------------------------------------------------------------------


def alibi_slopes(num_heads: int) -> np.ndarray:
    """ALiBi head slopes (float64 [num_heads]), as `get_slopes` in ofirpress/
    attention_with_linear_biases fairseq/models/transformer.py.

    A power of two n: start = 2**(-2**-(log2(n) - 3)), slopes start**1 .. start**n (8 heads:
    1/2, 1/4, ..., 1/256). Otherwise the slopes of the closest lower power of two c, then
    every other slope of 2c (its [0::2] slice) for the remaining n - c heads.
    """
    n = check_heads(num_heads)

    def power_of_2(m: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(m) - 3)))
        return [start ** (i + 1) for i in range(m)]

    if math.log2(n).is_integer():
        return np.asarray(power_of_2(n), np.float64)
    c = 2 ** math.floor(math.log2(n))
    extra = alibi_slopes(2 * c)[0::2][: n - c]
    return np.concatenate([np.asarray(power_of_2(c), np.float64), extra])


def alibi_tile(slopes, rel: jax.Array, symmetric: bool = True) -> jax.Array:
    """-slope * |i - j| (symmetric) or -slope * max(i - j, 0) (one-sided), float32, from the
    int differences rel = i - j and slopes that broadcast against them: the one formula of the
    reference path (`alibi_bias`) and of the Pallas kernel's tiles (posjax.kernels.terms).
    """
    rel = rel.astype(jnp.int32)
    dist = jnp.abs(rel) if symmetric else jnp.maximum(rel, 0)
    return -slopes * dist.astype(jnp.float32)


def alibi_bias(
    slopes: jax.Array, q_pos: jax.Array, k_pos: jax.Array, symmetric: bool = True
) -> jax.Array:
    """-slope * |i - j| (symmetric) or -slope * max(i - j, 0) (one-sided) as [B, H, Lq, Lk].

    The one-sided form is 0 for keys after the query: a causal mask hides them, and a
    bidirectional model that asks for it leaves them unpenalized (finite, never positive).
    """
    diff = query_minus_key(q_pos, k_pos)[:, None]  # [B, 1, Lq, Lk]
    return alibi_tile(_per_head(jnp.asarray(slopes)), diff, symmetric)


@register
@dataclasses.dataclass(frozen=True)
class Alibi(Scheme):
    """ALiBi (Press et al. 2022): a fixed per-head linear penalty on the distance.

    `symmetric`: None (default) follows the model: the encoder needs the symmetric
    -slope*|i-j| (fairseq's ALiBi is causal-only), and a causal model's -slope*(i-j) on j <= i
    is the same numbers on every pair its mask keeps, so None computes the symmetric form.
    False asks for the one-sided form in any model; True for the symmetric one.
    """

    name: ClassVar[str] = "alibi"

    symmetric: Optional[bool] = None

    def __post_init__(self):
        if self.symmetric not in (None, True, False):
            self.fail("symmetric", self.symmetric, "None (follow model.causal), True or False")

    def check(self, dims: Dims, length: int) -> None:
        check_heads(dims.num_heads)

    def bias(self, params: Params, q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
        del params  # none: the slopes follow from the head count
        slopes = alibi_slopes(self.bound_dims.num_heads)
        symmetric = True if self.symmetric is None else self.symmetric
        return alibi_bias(jnp.asarray(slopes, jnp.float32), q_pos, k_pos, symmetric)


# -- KERPLE -----------------------------------------------------------------------------

KERPLE_VARIANTS = ("log", "power")


def kerple_bias(
    r1: jax.Array, r2: jax.Array, q_pos: jax.Array, k_pos: jax.Array, variant: str = "log",
    eps: float = 1e-2,
) -> jax.Array:
    """KERPLE bias [B, H, Lq, Lk] from per-head r1, r2 [H] (Chi et al. 2022).

    log:   -r1 * log(1 + r2 * |i - j|)   (reference ParallelKerpleLog: r1 = bias_p, r2 = bias_a)
    power: -r1 * |i - j| ** r2           (reference ParallelKerplePower: r1 = bias_a, r2 = bias_p)
    r1, r2 are clamped to >= eps (and r2 <= 2 for power) with a straight-through clamp, as the
    reference (chijames/KERPLE megatron/mpu/layers.py) clamps its parameters to min eps = 1e-2.
    """
    if variant not in KERPLE_VARIANTS:
        raise ConfigError("position.variant", variant, f"one of {', '.join(KERPLE_VARIANTS)}")
    dist = abs_distance(q_pos, k_pos)[:, None]  # [B, 1, Lq, Lk]
    r1 = _per_head(straight_through_clamp(r1, eps))
    r2 = _per_head(straight_through_clamp(r2, eps, 2.0 if variant == "power" else None))
    return kerple_tile(r1, r2, dist, variant)


def kerple_tile(r1, r2, dist: jax.Array, variant: str = "log") -> jax.Array:
    """-r1 * log(1 + r2 * d) (log) or -r1 * d ** r2 (power) of float32 distances d >= 0, with
    (already clamped) r1, r2 that broadcast against them: the one formula of the reference
    path (`kerple_bias`) and of the Pallas kernel's tiles, whose r1 / r2 gradients are this
    function's JAX derivatives (posjax.kernels.terms.kerple)."""
    if variant == "log":
        return -r1 * jnp.log1p(r2 * dist)
    # 0 ** r2 is 0 for r2 > 0, but its derivative in r2 is 0 * log(0) = nan: keep the log
    # away from 0 and select the 0 afterwards.
    safe = jnp.where(dist > 0, dist, 1.0)
    return -r1 * jnp.where(dist > 0, safe**r2, 0.0)


@register
@dataclasses.dataclass(frozen=True)
class Kerple(Scheme):
    """KERPLE: a conditionally positive definite kernel of |i - j| with two learned positive
    parameters per head, per layer. `variant` 'log' (the paper's best) or 'power'.

    Init as the reference: U(0, 2) for the parameter called bias_p there, U(0, 1) for bias_a
    (log: r1 ~ U(0, 2), r2 ~ U(0, 1); power: r1 ~ U(0, 1), r2 ~ U(0, 2)). Draws below `eps`
    are used as `eps` (see `straight_through_clamp`).
    """

    name: ClassVar[str] = "kerple"

    variant: str = "log"
    eps: float = 1e-2

    def __post_init__(self):
        if self.variant not in KERPLE_VARIANTS:
            self.fail("variant", self.variant, f"one of {', '.join(KERPLE_VARIANTS)}")
        if not (isinstance(self.eps, (int, float)) and 0 < self.eps < 1):
            self.fail("eps", self.eps, "a number in (0, 1)")

    def check(self, dims: Dims, length: int) -> None:
        check_heads(dims.num_heads)

    def init_layer(self, rng: jax.Array) -> Params:
        dims = self.bound_dims
        heads = check_heads(dims.num_heads)
        k1, k2 = jax.random.split(rng)
        scale1, scale2 = (2.0, 1.0) if self.variant == "log" else (1.0, 2.0)
        return {
            "r1": jax.random.uniform(k1, (heads,), jnp.float32) * scale1,
            "r2": jax.random.uniform(k2, (heads,), jnp.float32) * scale2,
        }

    def bias(self, params: Params, q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
        return kerple_bias(params["r1"], params["r2"], q_pos, k_pos, self.variant, self.eps)


# -- Sandwich ---------------------------------------------------------------------------


def sandwich_inv_freq(dim: int) -> np.ndarray:
    """1 / 10000 ** (2k / dim) for k = 1 .. dim/2 (float64). NeMo starts k at 1, not 0."""
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0 or dim % 2:
        raise ConfigError("position.dim", dim, "a positive even integer (None = head_dim)")
    k = np.arange(1, dim // 2 + 1, dtype=np.float64)
    return 1.0 / 10000.0 ** (2.0 * k / dim)


def sandwich_head_scales(num_heads: int) -> np.ndarray:
    """NeMo's per-head compression: head h (1-based) divides the bias by h * 8 / H."""
    heads = check_heads(num_heads)
    return np.arange(1, heads + 1, dtype=np.float64) * 8.0 / heads


def sandwich_bias(num_heads: int, dim: int, q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
    """Sandwich bias [B, H, Lq, Lk] (Chi et al. 2023, NVIDIA NeMo
    sandwich_relative_position_embedding.py):

        (sum_{k=1..dim/2} cos(|i-j| / 10000**(2k/dim)) - dim/2) / (h * 8 / H)

    the inner product of two sinusoidal embeddings of width `dim`, shifted to 0 at distance 0
    (so it is <= 0), compressed per head. Computed as -2 * sum_k sin(x_k / 2)**2, the same
    number without the cancellation of `sum cos - dim/2` at short distances, one frequency at
    a time so that no [B, Lq, Lk, dim/2] array exists even outside jit.
    """
    dist = abs_distance(q_pos, k_pos)
    total = jnp.zeros_like(dist)
    for w in sandwich_inv_freq(dim):
        total = total + jnp.square(jnp.sin(dist * np.float32(w / 2.0)))
    scales = jnp.asarray(sandwich_head_scales(num_heads), jnp.float32)
    return (-2.0 * total)[:, None] / _per_head(scales)


@register
@dataclasses.dataclass(frozen=True)
class Sandwich(Scheme):
    """Sandwich: the dot product of sinusoidal embeddings of i and j as a fixed, per-head
    compressed bias; no learned parameters. `dim` None uses head_dim (NeMo passes kv_channels).
    """

    name: ClassVar[str] = "sandwich"

    dim: Optional[int] = None

    def __post_init__(self):
        if self.dim is not None:
            sandwich_inv_freq(self.dim)  # validates

    def _dim(self, dims: Dims) -> int:
        dim = dims.head_dim if self.dim is None else self.dim
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0 or dim % 2:
            field = "model.head_dim" if self.dim is None else "position.dim"
            raise ConfigError(field, dim, "a positive even integer for sandwich")
        return dim

    def check(self, dims: Dims, length: int) -> None:
        check_heads(dims.num_heads)
        self._dim(dims)

    def bias(self, params: Params, q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
        del params  # none: constants of the dims
        dims = self.bound_dims
        return sandwich_bias(dims.num_heads, self._dim(dims), q_pos, k_pos)

