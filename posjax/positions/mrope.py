"""M-RoPE, multimodal rotary position embedding (Qwen2-VL, Wang et al. 2024, "Qwen2-VL:
Enhancing Vision-Language Model's Perception of the World at Any Resolution"; transformers'
models/qwen2_vl: `Qwen2VLRotaryEmbedding.recomposition_frequencies`, `mrope_section`).

Positions are (t, h, w) triples, [B, L, 3]: a text token has t = h = w = its index, an image
patch the image's frame t and its row h and column w (plus the image's offset). RoPE's D/2
pairs keep their frequencies theta_i = base**(-2i/D); the pairs are cut into three
consecutive sections of `sections` = (s_t, s_h, s_w) pairs, and a pair of section c turns
by theta_i times coordinate c of the position:

    angle_i(t, h, w) = theta_i * (t, h, w)[c(i)],   c(i) = 0 for i < s_t, 1 for the next s_h, 2 after

so q_i . k_j depends on the positions only through (dt, dh, dw), and for a text token
(i, i, i) M-RoPE is plain RoPE. Qwen2-VL uses sections (16, 24, 24) of head dim 128:
`sections=None` takes those proportions, s_t = P - 2 s_h with s_h = s_w = (P - P // 4) // 2
of the P = D/2 pairs ((2, 3, 3) at D = 16). Pairing follows `interleaved`; transformers is
half-split (False, the default).

In posjax's patches experiment every image is one frame: positions (0, row, column), as
Qwen2-VL numbers a single image up to a shift, so the temporal pairs carry no position
there. Like rope2d, a 3-D scheme has no order for a causal mask (posjax's compares
positions), so it refuses causal models and sliding windows.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import jax
import jax.numpy as jnp
import numpy as np

from posjax.errors import ConfigError
from posjax.positions.base import Dims, Scheme
from posjax.positions.registry import register
from posjax.positions.rope_scaling import rope_inv_freq
from posjax.positions.rotary import rotate_by_angles


def default_sections(pairs: int) -> tuple[int, int, int]:
    """Qwen2-VL's proportions (16, 24, 24) of 64 pairs for any number of pairs."""
    side = (pairs - pairs // 4) // 2
    return (pairs - 2 * side, side, side)


def section_axes(sections) -> np.ndarray:
    """[P] int: the coordinate (0 = t, 1 = h, 2 = w) each pair turns with."""
    return np.repeat(np.arange(3), np.asarray(sections, int))


@register
@dataclasses.dataclass(frozen=True)
class Mrope(Scheme):
    """M-RoPE; see the module docstring. Fields: base (10000), sections ((s_t, s_h, s_w)
    pairs summing to head_dim / 2; None = Qwen2-VL's proportions), interleaved (False)."""

    name: ClassVar[str] = "mrope"
    position_dims: ClassVar[int] = 3

    base: float = 10000.0
    sections: Optional[tuple] = None
    interleaved: bool = False

    def __post_init__(self):
        if isinstance(self.base, bool) or not isinstance(self.base, (int, float)) \
                or not self.base > 1:
            self.fail("base", self.base, "a number > 1")
        if not isinstance(self.interleaved, bool):
            self.fail("interleaved", self.interleaved, "True or False")
        if self.sections is not None:
            try:
                sections = tuple(self.sections)
            except TypeError:
                sections = ()
            if len(sections) != 3 or not all(
                    isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0
                    for s in sections):
                self.fail("sections", self.sections, "None or three ints >= 0: the pairs "
                          "that turn with t, h and w (Qwen2-VL: 16, 24, 24 of 64)")
            # a frozen dataclass must hash; configs hand in lists
            object.__setattr__(self, "sections", tuple(int(s) for s in sections))

    def pair_sections(self, head_dim: int) -> tuple[int, int, int]:
        return self.sections if self.sections is not None else default_sections(head_dim // 2)

    def check(self, dims: Dims, length: int) -> None:
        del length
        if dims.head_dim % 2 or (self.sections is None and dims.head_dim < 6):
            raise ConfigError("model.head_dim", dims.head_dim, "an even number (>= 6 with "
                              "sections=None): mrope turns pairs of dims, one section of them "
                              "per coordinate")
        if self.sections is not None and sum(self.sections) != dims.head_dim // 2:
            self.fail("sections", list(self.sections), f"three ints summing to head_dim / 2 = "
                      f"{dims.head_dim // 2} (this sums to {sum(self.sections)})")
        if dims.causal:
            raise ConfigError("model.causal", True, "False: mrope positions are (t, h, w) "
                              "triples, with no order for a causal mask")

    def angles(self, pos: jax.Array, head_dim: int) -> jax.Array:
        """[..., L, 3] positions -> [..., L, 1, D/2] float32 angles (one heads axis)."""
        axes = jnp.asarray(section_axes(self.pair_sections(head_dim)))
        coords = jnp.take(jnp.asarray(pos).astype(jnp.float32), axes, axis=-1)  # [..., L, P]
        return (coords * rope_inv_freq(head_dim, self.base))[..., None, :]

    def rotate(self, params, q, k, q_pos, k_pos):
        del params
        dim = q.shape[-1]
        q = rotate_by_angles(q, self.angles(q_pos, dim), interleaved=self.interleaved)
        k = rotate_by_angles(k, self.angles(k_pos, dim), interleaved=self.interleaved)
        return q, k
