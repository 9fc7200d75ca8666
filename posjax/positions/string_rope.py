"""STRING with a Cayley basis: 2-D RoPE in a learned orthogonal basis (Schenck et al. 2025,
"Learning the RoPEs: Better 2D and 3D Position Encodings with STRING", Cayley-STRING).
Scheme `string`; the module is string_rope.py so as not to take the name of Python's
`string`.

STRING asks for position encodings R(r) that are rotations, separable and translation
invariant: R(r_i)^T R(r_j) = R(r_j - r_i). Its Cayley form takes RoPE's block rotations in a
learned basis, R(r) = RoPE(r) P, with P = (I - S)(I + S)^-1 orthogonal for S = A - A^T skew-
symmetric (A learned per layer and head, [H, D, D]). Then

    (R(r_i) q) . (R(r_j) k) = (P q)^T RoPE(r_j - r_i) (P k)

so logits depend on the positions only through r_j - r_i, while the planes the positions
turn are learned instead of RoPE's fixed pairs of dims. The RoPE part is `rope2d` (positions
[B, L, 2] (row, column); mode 'axial' or 'mixed' with learned frequencies, every field of
rope2d). A starts at 0: P = I, so STRING starts as rope2d; LAMB gives A a plain Adam step
(no decay, no trust ratio, which would hold it at 0: Scheme.no_decay). Cost per layer: one
D x D solve per head and one D x D product per token and head for q and for k. (The paper's
circulant variant, P = exp of a circulant skew matrix, is not built.)
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from posjax.positions.base import Params
from posjax.positions.small_linalg import solve_eye_plus_skew
from posjax.positions.registry import register
from posjax.positions.rope2d import Rope2d


def cayley(a: jax.Array) -> jax.Array:
    """[..., D, D] -> the orthogonal (I + S)^-1 (I - S), S = a - a^T (float32). (I - S) and
    (I + S)^-1 commute, so this is also (I - S)(I + S)^-1."""
    a = a.astype(jnp.float32)
    s = a - jnp.swapaxes(a, -1, -2)
    eye = jnp.eye(a.shape[-1], dtype=jnp.float32)
    return solve_eye_plus_skew(s, eye - s)


@register
@dataclasses.dataclass(frozen=True)
class String(Rope2d):
    """Cayley-STRING: rope2d after a learned orthogonal change of basis per layer and head;
    see the module docstring. Fields: those of rope2d."""

    name: ClassVar[str] = "string"
    no_decay: ClassVar[tuple[str, ...]] = ("cayley",)

    def init_layer(self, rng: jax.Array) -> Params:
        dims = self.bound_dims
        return {**super().init_layer(rng),
                "cayley": jnp.zeros((dims.num_heads, dims.head_dim, dims.head_dim), jnp.float32)}

    def basis(self, params) -> jax.Array:
        """P [H, D, D], orthogonal."""
        return cayley(params["cayley"])

    def rotate(self, params, q, k, q_pos, k_pos):
        p = self.basis(params)

        def change(x):
            return jnp.einsum("hde,blhe->blhd", p, x.astype(jnp.float32)).astype(x.dtype)

        return super().rotate(params, change(q), change(k), q_pos, k_pos)
