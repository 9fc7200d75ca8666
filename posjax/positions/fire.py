"""FIRE: Functional Interpolation for Relative Positions (Li et al. 2023, arXiv 2310.04418).

    b(i, j) = f_theta( psi(|i - j|) / (psi(max(L, i)) + eps) ),   psi(x) = log(|c * x| + 1)

f_theta is an MLP 1 -> mlp_width (ReLU) -> num_heads, c a learned scalar, L = |L_multiplier *
init_L| a learned threshold (init_L fixed, the multiplier learned), i the QUERY position. This
follows the PyTorch code in the paper's appendix (also in mcleish7/arithmetic), including its
0-based positions, the abs() around c*x and the eps added to the normalizer.

Dependence (what the tests check): b is a function of |i - j| and max(L, i). So it is
translation invariant only while every query position stays below L; past L the normalizer
grows with i and squeezes distances into [0, 1] ("progressive interpolation").

Bidirectional use: the reference is causal (j <= i, so |i - j| = i - j and the query position
i is the largest position in its context). Its abs() already makes it symmetric in i - j, and
we keep the query position as the normalizer for keys after the query too; then the ratio may
exceed 1 only when j - i > max(L, i), i.e. only past L, where the MLP extrapolates as it
would for a causal model. The same formula therefore serves both kinds of model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp

from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.bias import check_heads, abs_distance
from posjax.positions.registry import register


def fire_bias(
    params: Params, q_pos: jax.Array, k_pos: jax.Array, init_L: float = 512.0,
    eps: float = 1e-6,
) -> jax.Array:
    """FIRE bias [B, H, Lq, Lk] float32 from the params made by `Fire.init_layer`."""
    dist = abs_distance(q_pos, k_pos)  # [B, Lq, Lk]
    c = params["c"].astype(jnp.float32)
    threshold = jnp.abs(params["L_multiplier"].astype(jnp.float32) * init_L)
    normalizer = jnp.maximum(q_pos.astype(jnp.float32), threshold)  # [B, Lq]
    num = jnp.log(jnp.abs(c * dist) + 1.0)
    den = jnp.log(jnp.abs(c * normalizer) + 1.0) + eps
    x = num / den[:, :, None]  # [B, Lq, Lk], in [0, 1] while positions stay below L

    # The MLP one hidden unit at a time: each step is elementwise on [B, H, Lq, Lk], so no
    # [B, Lq, Lk, mlp_width] activation exists in the forward pass. A fori_loop (not a Python
    # loop) keeps the compiled program the same size whatever mlp_width is.
    w1, b1, w2, b2 = (params[k].astype(jnp.float32) for k in ("w1", "b1", "w2", "b2"))
    out = jnp.broadcast_to(b2[None, :, None, None], (x.shape[0], b2.shape[0], *x.shape[1:]))

    def add_unit(m, acc):
        hidden = jax.nn.relu(x * w1[m] + b1[m])  # [B, Lq, Lk]
        return acc + w2[m][None, :, None, None] * hidden[:, None]

    return jax.lax.fori_loop(0, w1.shape[0], add_unit, out)


@register
@dataclasses.dataclass(frozen=True)
class Fire(Scheme):
    """FIRE with learned per-layer params: the MLP, c (init `init_c`) and the multiplier of L.

    `init_L` is the threshold at init (the paper uses the training length, 512 in the
    reference); it is a fixed constant, the learned part is `L_multiplier` (init 1).
    MLP init as torch.nn.Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases.
    """

    name: ClassVar[str] = "fire"
    no_decay: ClassVar[tuple[str, ...]] = ("b1", "b2")  # the MLP's biases: BERT excludes biases

    mlp_width: int = 32
    init_c: float = 0.1
    init_L: float = 512.0
    eps: float = 1e-6

    def __post_init__(self):
        if isinstance(self.mlp_width, bool) or not isinstance(self.mlp_width, int) or self.mlp_width <= 0:
            self.fail("mlp_width", self.mlp_width, "a positive integer")
        for field in ("init_c", "init_L", "eps"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                self.fail(field, value, "a positive number")

    def check(self, dims: Dims, length: int) -> None:
        check_heads(dims.num_heads)

    def init_layer(self, rng: jax.Array) -> Params:
        dims = self.bound_dims
        heads = check_heads(dims.num_heads)
        width = self.mlp_width
        k1, k2, k3, k4 = jax.random.split(rng, 4)

        def uniform(key, shape, fan_in):
            bound = 1.0 / math.sqrt(fan_in)
            return jax.random.uniform(key, shape, jnp.float32, -bound, bound)

        return {
            "w1": uniform(k1, (width,), 1),  # Linear(1, width): fan_in 1
            "b1": uniform(k2, (width,), 1),
            "w2": uniform(k3, (width, heads), width),
            "b2": uniform(k4, (heads,), width),
            "c": jnp.asarray(self.init_c, jnp.float32),
            "L_multiplier": jnp.asarray(1.0, jnp.float32),
        }

    def bias(self, params: Params, q_pos: jax.Array, k_pos: jax.Array) -> jax.Array:
        return fire_bias(params, q_pos, k_pos, self.init_L, self.eps)
