"""SSMax, Scalable-Softmax (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention"),
on RoPE.

Softmax over n keys flattens as n grows: its largest weight goes to 0 like 1/n for logits
of a fixed size, so attention fades on long inputs. SSMax raises the base of the softmax to
n: weight_j = n**(s z_j) / sum_k n**(s z_k), i.e. softmax of the logits z times s * log(n),
with s a learned scalar per layer and head and n the number of keys the query attends. The
paper's models are RoPE Transformers; here the scheme is RoPE (every `rope` field) plus SSMax.

Relation to log-n scaling (`model.logn_length = T`, Chiang & Cholak 2022; Su 2021): log-n
multiplies every head's logits by log(n) / log(T), a fixed s = 1 / log(T) that leaves the
logits unchanged at the training length. SSMax learns s per head instead (and so changes
logits at every length); with s = 1 / log(T) in every head it is log-n exactly. Both use
attention's count of the keys each query may attend after every mask (causal, padding,
segments, windows), on every path; SSMax through the `length_scale` hook, which multiplies
the same place, so the two compose (their factors multiply) when both are set.

The parameter is `s_offset` [H] per layer, s = s_init + s_offset: it starts at 0, and LAMB
gives it a plain Adam step (no decay, no trust ratio, which would hold it at 0). s_init
defaults to 0.43, the value a public reimplementation (gdevos010/Scalable-Softmax) takes from
the paper; 1 / log(T) starts as plain RoPE at the training length. Nothing to extend: SSMax
is the length generalization ('as_is').
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from posjax.positions.base import Params
from posjax.positions.extension import AS_IS
from posjax.positions.registry import register
from posjax.positions.rotary import Rope


@register
@dataclasses.dataclass(frozen=True)
class Ssmax(Rope):
    """RoPE with each query's logits times s_h * log(n_keys); see the module docstring.
    Fields: those of rope, and s_init (the starting s of every head, > 0)."""

    name: ClassVar[str] = "ssmax"
    no_decay: ClassVar[tuple[str, ...]] = ("s_offset",)
    extend_methods: ClassVar[dict] = {}
    default_extension: ClassVar[str] = AS_IS
    extend_refusal: ClassVar[str] = "position '{scheme}' has no extension '{method}'"

    s_init: float = 0.43

    def __post_init__(self):
        super().__post_init__()
        s = self.s_init
        if isinstance(s, bool) or not isinstance(s, (int, float, np.floating)) or not s > 0:
            self.fail("s_init", s, "a number > 0 (the starting s of s * log(n); "
                      "1 / log(T) starts as plain softmax at length T)")

    def init_layer(self, rng: jax.Array) -> Params:
        del rng
        return {"s_offset": jnp.zeros((self.bound_dims.num_heads,), jnp.float32)}

    def length_scale(self, params, n_keys):
        """s_h * log(n) [B, H, Lq] from n_keys [B, 1, Lq]; 0 for a query with no key."""
        s = self.s_init + params["s_offset"].astype(jnp.float32)
        log_n = jnp.log(jnp.maximum(n_keys, 1).astype(jnp.float32))
        return s[None, :, None] * log_n
