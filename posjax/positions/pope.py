"""PoPE, polar coordinate position embeddings (Gopalakrishnan et al. 2025, "Decoupling the
'What' and 'Where' With Polar Coordinate Positional Embeddings").

RoPE rotates pairs of dims whose own angle comes from the content, so content and position
share the phase of every pair. PoPE makes each of the D dims one complex number whose
MAGNITUDE is the content, softplus(x_c) >= 0, and whose PHASE is the position only:
    q~_tc = softplus(q_tc) e^{i t theta_c},   k~_sc = softplus(k_sc) e^{i (s theta_c + delta_hc)}
    raw_ts = Re[sum_c conj(q~_tc) k~_sc] = sum_c softplus(q_tc) softplus(k_sc)
                                                 cos((s - t) theta_c + delta_hc)
with D frequencies theta_c = base**(-c/D) (one per dim, not per pair) and an optional
learned phase bias delta [H, D], clamped to [-2 pi, 0] and initialized to 0 (as
lucidrains/PoPE-pytorch). Logits depend on positions only through s - t.

The `scores` hook computes it per tile as the dot product of the 2D-wide real vectors
(mu cos phi, mu sin phi): O(block x D) per tile. Not fused in the Pallas kernel (an
explicit 'kernel' falls back to 'chunked', like the other unfused schemes).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from posjax.positions.base import Params, Scheme
from posjax.positions.registry import register


def pope_inv_freq(dim: int, base: float) -> jax.Array:
    """theta_c = base**(-c/dim), c = 0..dim-1 (float32)."""
    return jnp.asarray(base ** (-np.arange(dim) / dim), jnp.float32)


def polar(x: jax.Array, pos: jax.Array, inv_freq: jax.Array, phase=None) -> jax.Array:
    """[..., L, H, D] -> [..., L, H, 2D] float32: (softplus(x) cos phi | softplus(x) sin phi),
    phi = pos * theta (+ phase [H, D])."""
    phi = jnp.asarray(pos, jnp.float32)[..., None, None] * inv_freq  # [..., L, 1, D]
    if phase is not None:
        phi = phi + phase
    mu = jax.nn.softplus(x.astype(jnp.float32))
    return jnp.concatenate([mu * jnp.cos(phi), mu * jnp.sin(phi)], axis=-1)


def pope_scores(q, k, q_pos, k_pos, base: float, phase=None) -> jax.Array:
    """Raw PoPE logits [B, H, Lq, Lk] float32 (see the module docstring)."""
    inv_freq = pope_inv_freq(q.shape[-1], base)
    qp = polar(q, q_pos, inv_freq)
    kp = polar(k, k_pos, inv_freq, phase)
    return jnp.einsum("bqhd,bkhd->bhqk", qp, kp)


@register
@dataclasses.dataclass(frozen=True)
class Pope(Scheme):
    """PoPE; see the module docstring. Fields: base (10000), learn_bias (the phase bias
    delta per head and frequency; False = no bias)."""

    name: ClassVar[str] = "pope"
    no_decay: ClassVar[tuple[str, ...]] = ("delta",)

    base: float = 10000.0
    learn_bias: bool = True

    def __post_init__(self):
        if not (isinstance(self.base, (int, float)) and self.base > 1):
            self.fail("base", self.base, "a number > 1")
        if not isinstance(self.learn_bias, bool):
            self.fail("learn_bias", self.learn_bias, "True or False")

    def init_layer(self, rng: jax.Array) -> Params:
        del rng
        if not self.learn_bias:
            return {}
        dims = self.bound_dims
        return {"delta": jnp.zeros((dims.num_heads, dims.head_dim), jnp.float32)}

    def scores(self, params, q, k, q_pos, k_pos):
        phase = None
        if self.learn_bias:
            phase = jnp.clip(params["delta"].astype(jnp.float32), -2 * math.pi, 0.0)
        return pope_scores(q, k, q_pos, k_pos, self.base, phase)
