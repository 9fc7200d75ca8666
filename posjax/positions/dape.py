"""DAPE: Data-Adaptive Positional Encoding (Zheng et al., NeurIPS 2024, "DAPE: Data-Adaptive
Positional Encoding for Length Extrapolation").

A static bias B (ALiBi, KERPLE or FIRE) is made adaptive by a small MLP that, for every
(query i, key j) pair, reads the logits and the biases of ALL heads at once:

    logits_ij = x_ij + b_ij + f([x_ij ; b_ij])        x_ij, b_ij in R^H (one entry per head)
    f(z) = W2 leaky_relu(W1 z + c1) + c2              W1: 2H -> mlp_width, W2: mlp_width -> H

x is the scaled q.k (q.k / sqrt(D)), b the base scheme's bias of the pair. This follows the
authors' code (chuanyang-Zheng/DAPE: `AliBi_DAPE`, `ParallelKerpleLog_DAPE`, `FIRE_DAPE` in
DAPE.py; their training versions `AliBi_C`, `ParallelKerpleLog_C`, `FIRE_C` in
megatron/model/positional_embeddings.py, called from ParallelSelfAttention.attention), which
returns `x + a + mlp2(cat(x, a))`:
  - the MLP input is the concatenation [x of heads 0..H-1, b of heads 0..H-1] of one pair
    (`torch.cat(..., dim=1)` over the head axis, then a Linear on the last axis after a
    permute), so W1's first H rows act on the logits and the last H on the biases;
  - f is Linear(2H, mlp_width) -> LeakyReLU (slope 0.01) -> Linear(mlp_width, H), with
    mlp_width = 32 in the release's configs (`"mlp_width": 32`), torch.nn.Linear's
    default init U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases;
  - x is the SCALED logit (`baddbmm(..., alpha=1/norm_factor)`, norm_factor = sqrt(D)) and it
    is NOT detached: the gradient reaches q and k through the MLP too;
  - the MLP acts on the whole [B, 2H, L, L] scores BEFORE the attention mask (the mask is
    applied by the softmax afterwards); here too every mask comes after it (the `map_logits`
    hook, posjax/positions/base.py). Each pair's output reads only that pair, so a padding
    key changes nothing at a real key and a masked key stays masked.

Where this differs from the code (and why):
  - The paper writes the adapted attention as the logits plus a function f of the logits
    and the bias; the code adds the static bias outside the MLP as well (a residual: x + b +
    f([x; b])). We follow the code. With f = 0 (W2 = 0, c2 = 0) DAPE is exactly its base
    scheme, which the tests check.
  - The code's biases are causal (`torch.tril`: 0 above the diagonal, which the causal mask
    hides). posjax's ALiBi / KERPLE / FIRE give their symmetric |i - j| form (bias.py, fire.py),
    which equals the causal one on every pair a causal mask keeps, and also serves encoders;
    the MLP then sees the same numbers as the code on every pair that is not masked.
  - FIRE: the code's DAPE-FIRE (`FIRE_DAPE`, `FIRE_C`) also changes FIRE's own MLP
    activation to LeakyReLU (plain `FIRE` uses ReLU) and, in the megatron version, halves
    init_L. Here the base is posjax's `fire` scheme unchanged (ReLU, its init_L), reused as
    it is, like the other two bases.
  - The base is built from its name at its default fields (KERPLE 'log', FIRE mlp_width 32,
    init_L 512, ALiBi symmetric); its parameters (KERPLE's r1, r2;
    FIRE's MLP, c and L multiplier) sit under params['base'] and learn as in the base scheme.
  - DAPE V2 (the same authors' follow-up, `Alibi_DAPEV2` etc. in the release) replaces the
    MLP by a 1 x k convolution across neighbouring keys: not this scheme, and not tile-local.

Default base: 'kerple' (DAPE-Kerple), the variant the paper's further experiments (ablations,
longer training lengths) are reported with, as recalled when this module was written; the
release itself trains all three (configs 125M_alibi_c / 125M_kerple_c / 125M_fire_c) and
names no default, so check this against the paper's text before relying on it.

Cost: about 6 H mlp_width flops per pair (q.k has 2 H D), in one fused elementwise loop per
tile (`dape_mlp`: the hidden layer is never stored). The Pallas kernel
has no term for it: `model.attention='kernel'` falls back to chunked (same numbers).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.bias import check_heads
from posjax.positions.registry import make, register

# The static biases DAPE wraps (registered scheme names), as in the paper and its code.
BASES = ("alibi", "kerple", "fire")
LEAKY_SLOPE = 0.01  # torch.nn.LeakyReLU's default negative_slope, as in the code


@functools.lru_cache(maxsize=None)
def bound_base(name: str, dims: Dims) -> Scheme:
    """The base scheme `name` at its default fields, bound to `dims`."""
    return make(name).bind(dims)


def dape_mlp(params: Params, logits: jax.Array, bias: jax.Array) -> jax.Array:
    """f([x; b]) [B, H, q, k] float32 of logits x and bias b [B, H, q, k]: per (i, j) pair the
    2H-vector [x_ij (heads 0..H-1), b_ij (heads 0..H-1)] through Linear(2H, W) -> LeakyReLU ->
    Linear(W, H) with params w1 [2H, W], b1 [W], w2 [W, H], b2 [H].

    Written channel by channel (2H * W + W * H scalar multiply-adds on [B, q, k] planes), not
    as einsums over the head axis: XLA then fuses the whole MLP into one elementwise loop that
    reads each pair's 2H inputs once and never stores the [B, q, k, W] hidden layer, where the
    einsums ran as dots with a 2H-long contraction around that stored layer, several times
    slower on XLA:CPU.
    """
    w1, b1, w2, b2 = (params[k].astype(jnp.float32) for k in ("w1", "b1", "w2", "b2"))
    heads = logits.shape[1]
    inputs = ([logits[:, c].astype(jnp.float32) for c in range(heads)]
              + [bias[:, c].astype(jnp.float32) for c in range(heads)])
    out = [b2[h] for h in range(heads)]
    for m in range(w1.shape[1]):
        hidden = b1[m]
        for c, z in enumerate(inputs):
            hidden = hidden + w1[c, m] * z
        hidden = jax.nn.leaky_relu(hidden, LEAKY_SLOPE)
        out = [o + w2[m, h] * hidden for h, o in enumerate(out)]
    return jnp.stack(out, axis=1)


@register
@dataclasses.dataclass(frozen=True)
class Dape(Scheme):
    """DAPE: a base bias scheme (`base`: alibi, kerple or fire, at its default fields) whose
    bias, with every head's logit of the same (query, key) pair, goes through an MLP of
    width `mlp_width` (LeakyReLU) added to logits + bias; see the module docstring."""

    name: ClassVar[str] = "dape"
    no_decay: ClassVar[tuple[str, ...]] = ("b1", "b2")  # the MLP's biases: BERT excludes biases

    base: str = "kerple"
    mlp_width: int = 32

    def __post_init__(self):
        if not isinstance(self.base, str) or self.base not in BASES:
            self.fail("base", self.base, f"one of {', '.join(BASES)} (the static bias DAPE "
                      "adapts)")
        width = self.mlp_width
        if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width <= 0:
            self.fail("mlp_width", width, "a positive integer (the MLP's hidden width; 32 in "
                      "the paper's code)")

    def check(self, dims: Dims, length: int) -> None:
        super().check(dims, length)
        check_heads(dims.num_heads)
        make(self.base).check(dims, length)

    @property
    def base_scheme(self) -> Scheme:
        """The bound base scheme whose `bias` hook DAPE adapts."""
        return bound_base(self.base, self.bound_dims)

    def init_layer(self, rng: jax.Array) -> Params:
        heads = check_heads(self.bound_dims.num_heads)
        width = int(self.mlp_width)
        k_base, k1, k2, k3, k4 = jax.random.split(rng, 5)

        def uniform(key, shape, fan_in):  # torch.nn.Linear's default init
            bound = 1.0 / math.sqrt(fan_in)
            return jax.random.uniform(key, shape, jnp.float32, -bound, bound)

        params = {
            "w1": uniform(k1, (2 * heads, width), 2 * heads),
            "b1": uniform(k2, (width,), 2 * heads),
            "w2": uniform(k3, (width, heads), width),
            "b2": uniform(k4, (heads,), width),
        }
        base = self.base_scheme.init_layer(k_base)
        if base:  # ALiBi has none: no empty subtree in the checkpoint
            params["base"] = base
        return params

    def map_logits(self, params: Params, logits: jax.Array, q_pos: jax.Array,
                   k_pos: jax.Array) -> jax.Array:
        bias = self.base_scheme.bias(params.get("base", {}), q_pos, k_pos).astype(jnp.float32)
        bias = jnp.broadcast_to(bias, logits.shape)
        return logits + bias + dape_mlp(params, logits, bias)
