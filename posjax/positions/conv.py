"""Convolutional position (CPE / wav2vec2 style): a depthwise convolution over the token
sequence, added to the embeddings, x + gelu(conv(x) + b).

There is no position anywhere in the formula: a convolution is translation-equivariant, so
whatever position the output carries comes from the sequence boundaries, i.e. from the
padding (Islam et al. ICLR 2020, "How much position information do convolutional neural
networks encode?"). The padding is therefore the scheme's main field:
  zeros     neighbours outside the example count as zero vectors; tokens near either end see
            a different number of real neighbours, which tells them where they are
  circular  the row wraps around (token L-1 is the left neighbour of token 0): every token
            sees the same kind of neighbourhood, so no absolute position can be read off
  none      no padding ("valid" convolution): only tokens whose whole window lies inside
            the example get the conv term; the K-1 tokens at the ends get none

"Outside the example" is decided by the explicit positions, not by array indices: the
neighbour at offset s of token i counts only if pos[i + s] == pos[i] + s, so packed examples
(positions restart) and right padding (positions 0) act as boundaries, like the ends of the
row. `circular` wraps the whole row (meant for unpacked rows, as in the probe experiment).

Causal models (dims.causal) use a causal window (offsets -(K-1)..0) so no token sees a later
one; `circular` would wrap the future in and is refused there.

placement: 'embed' adds the conv once to the token embeddings before layer 0 (wav2vec2);
'layers' gives every layer its own conv, added to that layer's input (the `layer_input`
hook; CPVT's PEG placed in each block).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.registry import register

PADDINGS = ("zeros", "circular", "none")
PLACEMENTS = ("embed", "layers")


def window_offsets(kernel_size: int, causal: bool) -> list[int]:
    """Offsets s of the neighbours x[i + s] that kernel taps 0..K-1 read."""
    if causal:
        return list(range(-(kernel_size - 1), 1))
    half = kernel_size // 2
    return list(range(-half, kernel_size - half))


def depthwise_conv(x: jax.Array, kernel: jax.Array, pos: jax.Array, padding: str,
                   causal: bool = False) -> jax.Array:
    """out[b, i, e] = sum_t kernel[t, e] * x[b, i + s_t, e]   (s_t = window_offsets).

    x [B, L, E], kernel [K, E], pos [B, L] int; float32 out. A neighbour outside the example
    (see the module docstring) is zero ('zeros'), wraps ('circular'), or switches the token's
    whole conv term off ('none'). One shifted copy per tap (a scan): O(K L E) work, O(L E) memory.
    """
    length = x.shape[1]
    x = x.astype(jnp.float32)
    idx = jnp.arange(length)
    offsets = jnp.asarray(window_offsets(kernel.shape[0], causal), jnp.int32)

    def tap(carry, tap_and_offset):
        # A scan over taps, not a Python loop: compile time does not grow with K.
        out, complete = carry
        w, s = tap_and_offset
        shifted = jnp.roll(x, -s, axis=1)  # shifted[:, i] = x[:, (i + s) mod L]
        if padding != "circular":
            inside = (idx + s >= 0) & (idx + s < length)
            same = jnp.roll(pos, -s, axis=1) - pos == s  # consecutive: the same example
            real = inside[None, :] & same
            complete = complete & real
            if padding == "zeros":
                shifted = jnp.where(real[..., None], shifted, 0.0)
        return (out + w * shifted, complete), None

    init = (jnp.zeros_like(x), jnp.ones(pos.shape, jnp.bool_))
    (out, complete), _ = jax.lax.scan(tap, init, (kernel.astype(jnp.float32), offsets))
    if padding == "none":
        out = jnp.where(complete[..., None], out, 0.0)
    return out


@register
@dataclasses.dataclass(frozen=True)
class ConvPosition(Scheme):
    """Depthwise-conv position: x + gelu(conv(x) + b), see the module docstring.

    Fields: kernel_size K (odd for the centred window of encoders; 128 in wav2vec2, which
    drops one output to centre it), padding 'zeros' | 'circular' | 'none', placement
    'embed' | 'layers'.
    """

    name: ClassVar[str] = "conv"

    kernel_size: int = 15
    padding: str = "zeros"
    placement: str = "embed"

    def __post_init__(self):
        k = self.kernel_size
        if not (isinstance(k, int) and not isinstance(k, bool) and k >= 1 and k % 2 == 1):
            self.fail("kernel_size", k, "an odd int >= 1 (a window centred on the token)")
        if self.padding not in PADDINGS:
            self.fail("padding", self.padding, f"one of {', '.join(PADDINGS)}")
        if self.placement not in PLACEMENTS:
            self.fail("placement", self.placement,
                      "'embed' (once, before layer 0) or 'layers' (every layer's input)")

    def check(self, dims: Dims, length: int) -> None:
        if dims.causal and self.padding == "circular":
            self.fail("padding", self.padding, "'zeros' or 'none' in a causal model (circular "
                      "padding wraps later tokens into the window)")
        if self.padding == "none" and self.kernel_size > length:
            self.fail("kernel_size", self.kernel_size, f"<= the length {length} with "
                      "padding='none' (no token would have a complete window)")

    @property
    def hooks(self) -> tuple[str, ...]:
        return ("embed",) if self.placement == "embed" else ("layer_input",)

    def _init(self, rng: jax.Array, width: int) -> Params:
        # std 1/sqrt(K): a tap sum of unit-variance inputs keeps unit variance.
        kernel = jax.random.normal(rng, (self.kernel_size, width), jnp.float32)
        return {"kernel": kernel / self.kernel_size ** 0.5,
                "bias": jnp.zeros((width,), jnp.float32)}

    def _add(self, params: Params, x: jax.Array, pos: jax.Array) -> jax.Array:
        causal = self.bound_dims.causal
        conv = depthwise_conv(x, params["kernel"], pos, self.padding, causal) + params["bias"]
        return x + jax.nn.gelu(conv, approximate=False).astype(x.dtype)

    def init_embed(self, rng: jax.Array) -> Params:
        if self.placement != "embed":
            return {}
        return self._init(rng, self.bound_dims.embed_width)

    def embed(self, params: Params, x: jax.Array, pos: jax.Array, ids=None) -> jax.Array:
        del ids
        return self._add(params, x, pos) if self.placement == "embed" else x

    def init_layer(self, rng: jax.Array) -> Params:
        if self.placement != "layers":
            return {}
        return self._init(rng, self.bound_dims.hidden)

    def layer_input(self, params: Params, x: jax.Array, pos: jax.Array) -> jax.Array:
        return self._add(params, x, pos) if self.placement == "layers" else x
