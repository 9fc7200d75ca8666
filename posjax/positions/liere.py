"""Learned rotations of 2-D positions: LieRE (Ostmeier et al. 2024, "LieRE: Generalizing
Rotary Position Encodings") and ComRoPE (Yu et al., CVPR 2025, "ComRoPE: Scalable and Robust
Rotary Position Embedding Parameterized by Trainable Commuting Angle Matrices"; code:
Longin-Yu/ComRoPE, model.py: `LieREAttention`, `ComRoPEAPAttention`, `ComRoPELDAttention`).

Both rotate each head's query and key by R(p) = exp(r A_r + c A_c) for a patch at (row r,
column c), with learned skew-symmetric generators A_r, A_c, block-diagonal with D / b blocks
of b x b (`block_size`), so the exponential is taken per block: [B, L, H, D/b, b, b]. RoPE is
the case b = 2 with fixed generators. Then

    (R(p_i) q) . (R(p_j) k) = q^T exp(-(r_i A_r + c_i A_c)) exp(r_j A_r + c_j A_c) k

which is q^T exp((r_j - r_i) A_r + (c_j - c_i) A_c) k, a function of the offset only, exactly
when A_r and A_c commute (block by block). b x b skew blocks with b >= 3 do not commute in
general:
  liere     A_r, A_c free per head and block (freqs [H, 2, D/b, b, b], A = F - F^T): general
            rotations, logits not relative (except b = 2, where every 2 x 2 skew block
            commutes);
  comrope   commuting by construction, so logits depend on (dr, dc) only:
            variant 'ap' (axis-partitioned): one free block per block slot, used by the row
              for even slots and by the column for odd ones (the other axis's is 0);
            variant 'ld' (linearly dependent): one free block per head and slot, times a
              learned scalar per axis and slot, A_axis = theta_axis (F - F^T).

Positions: ComRoPE's code feeds (p + 0.5) / n in [0, 1] for n patches per axis, with
generators of std 1. posjax positions are integer patch indices, so the generators start at
std `init_std` (1/8: the same angles per step on an 8-wide training grid) and larger grids
are reached by extrapolation, not by rescaling positions. The generator parameters are named
`freqs` as in the reference, so the optimizer keeps them out of weight decay like rope2d's
learned frequencies (decay would pull them towards no rotation); ComRoPE-LD's per-axis
scalars (`axis_scales`, started at N(0, 1) as in the reference) are decayed like any weight.
LieRE's code also divides its parameters by a large constant to slow their learning rate;
posjax leaves learning rates to the optimizer.

Like rope2d these are 2-D schemes: they refuse causal models and sliding windows.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from posjax.errors import ConfigError
from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.small_linalg import expm_skew
from posjax.positions.registry import register

AXES = 2  # (row, column)
VARIANTS = ("ap", "ld")


def skew(f: jax.Array) -> jax.Array:
    return f - jnp.swapaxes(f, -1, -2)


def rotations(pos: jax.Array, generators: jax.Array) -> jax.Array:
    """exp(sum_a pos[..., a] G_a) per block, [B, L, H, D/b, b, b] (float32); generators
    [H, AXES, D/b, b, b] skew-symmetric."""
    p = jnp.asarray(pos).astype(jnp.float32)  # [B, L, AXES]
    return expm_skew(jnp.einsum("bla,hanij->blhnij", p, generators.astype(jnp.float32)))


def turn(x: jax.Array, r: jax.Array) -> jax.Array:
    """x [B, L, H, D] turned block by block by r [B, L, H, D/b, b, b]; x.dtype out. A fused
    multiply-and-sum: as a batched dot XLA runs each b x b product on its own."""
    xb = x.astype(jnp.float32).reshape(x.shape[:-1] + r.shape[-3:-1])
    return (r * xb[..., None, :]).sum(axis=-1).reshape(x.shape).astype(x.dtype)


@register
@dataclasses.dataclass(frozen=True)
class Liere(Scheme):
    """LieRE: free skew-symmetric generators per head, axis and block (module docstring).
    Fields: block_size (4), init_std (1/8). ComRoPE is this with commuting generators."""

    name: ClassVar[str] = "liere"
    position_dims: ClassVar[int] = 2

    block_size: int = 4
    init_std: float = 0.125

    def __post_init__(self):
        b = self.block_size
        if isinstance(b, bool) or not isinstance(b, int) or b < 2:
            self.fail("block_size", b, "an int >= 2 (the size of each rotated block of dims)")
        s = self.init_std
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not s > 0:
            self.fail("init_std", s, "a number > 0 (the generators' starting std per "
                      "position step)")

    def check(self, dims: Dims, length: int) -> None:
        del length
        if dims.head_dim % self.block_size:
            self.fail("block_size", self.block_size,
                      f"a divisor of the head dim {dims.head_dim}")
        if dims.causal:
            raise ConfigError("model.causal", True, f"False: {self.name} positions are "
                              "(row, column) pairs with no order for a causal mask")

    def blocks(self) -> int:
        return self.bound_dims.head_dim // self.block_size

    def init_layer(self, rng: jax.Array) -> Params:
        d = self.bound_dims
        shape = (d.num_heads, AXES, self.blocks(), self.block_size, self.block_size)
        return {"freqs": self.init_std * jax.random.normal(rng, shape, jnp.float32)}

    def generators(self, params) -> jax.Array:
        """[H, AXES, D/b, b, b] skew-symmetric generators."""
        return skew(params["freqs"].astype(jnp.float32))

    def rotate(self, params, q, k, q_pos, k_pos):
        g = self.generators(params)
        r_q = rotations(q_pos, g)
        r_k = r_q if k_pos is q_pos else rotations(k_pos, g)  # self-attention: one exponential
        return turn(q, r_q), turn(k, r_k)


@register
@dataclasses.dataclass(frozen=True)
class Comrope(Liere):
    """ComRoPE: commuting generators, 'ap' (axis-partitioned blocks) or 'ld' (one block per
    slot times a learned scalar per axis); module docstring. Fields: variant ('ap'),
    block_size (4), init_std (1/8)."""

    name: ClassVar[str] = "comrope"

    variant: str = "ap"

    def __post_init__(self):
        super().__post_init__()
        if self.variant not in VARIANTS:
            self.fail("variant", self.variant, "'ap' (axis-partitioned) or 'ld' (linearly "
                      "dependent)")

    def check(self, dims: Dims, length: int) -> None:
        super().check(dims, length)
        if self.variant == "ap" and (dims.head_dim // self.block_size) % AXES:
            self.fail("block_size", self.block_size, f"a divisor of the head dim "
                      f"{dims.head_dim} leaving an even number of blocks (variant 'ap' gives "
                      "alternate blocks to the row and the column)")

    def init_layer(self, rng: jax.Array) -> Params:
        d = self.bound_dims
        shape = (d.num_heads, self.blocks(), self.block_size, self.block_size)
        f_rng, a_rng = jax.random.split(rng)
        params = {"freqs": self.init_std * jax.random.normal(f_rng, shape, jnp.float32)}
        if self.variant == "ld":
            params["axis_scales"] = jax.random.normal(a_rng, (AXES, self.blocks()), jnp.float32)
        return params

    def generators(self, params) -> jax.Array:
        base = skew(params["freqs"].astype(jnp.float32))[:, None]  # [H, 1, D/b, b, b]
        if self.variant == "ld":
            scales = params["axis_scales"].astype(jnp.float32)  # [AXES, D/b]
            return base * scales[None, :, :, None, None]
        axis_of_block = jnp.arange(self.blocks()) % AXES
        mask = (axis_of_block[None, :] == jnp.arange(AXES)[:, None]).astype(jnp.float32)
        return base * mask[None, :, :, None, None]
