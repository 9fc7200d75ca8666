"""FoX, forgetting attention (Lin et al. ICLR 2025, "Forgetting Transformer: Softmax
Attention with a Forget Gate"): a data-dependent decay on the logits.

Every token t gets a forget gate per head, f_t = sigmoid(w_h . k_t + b_h), and a key j is
seen by query i through the product of the gates between them:
    logits_ij += sum_{l=j+1..i} log f_l = c_i - c_j,    c = cumsum(log f) over the row.
`prepare` computes c once per forward on the whole row (O(L)); every tile's bias is then
c[q] - c[k] from the tile's rows (`token_bias`), so reference and chunked need no [L, L]
array. A cumsum over the row is right for packed rows too: c_i - c_j only ever matters for
i, j in one example (other pairs are masked), where it sums exactly the gates between them.

Differences from the paper, both deliberate:
  * the gate reads the key vector k_t (a per-token projection of the layer input through the
    key weights), not the layer input x_t itself: `attend` sees q, k, v only. The gate's
    projection of x is therefore restricted to the span of that head's key weights.
  * encoders: FoX is causal. For a key after the query (bidirectional models) posjax uses the
    mirror image, the gates between them sum_{l=i+1..j} log f_l = c_j - c_i, so the bias is
    -|c_i - c_j| (c never increases): a decay in both directions.

Self-attention only (c is indexed by the same tokens for queries and keys). Fused in the
Pallas kernel: `prepare` runs before it and the kernel reads c per tile, returning its
gradient in the backward pass (posjax/kernels/terms/fox.py).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from posjax.errors import ConfigError
from posjax.positions.base import Params, Scheme
from posjax.positions.registry import register


def forget_cumsum(k: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    """c [B, L, H] float32: cumsum over L of log sigmoid(w_h . k_t + b_h); k [B, L, H, D]."""
    gate = jnp.einsum("blhd,hd->blh", k.astype(jnp.float32), w.astype(jnp.float32)) + b
    return jnp.cumsum(jax.nn.log_sigmoid(gate), axis=1)


def forget_tile(c_q: jax.Array, c_k: jax.Array, q_pos: jax.Array, k_pos: jax.Array):
    """c_i - c_j for keys at or before the query, c_j - c_i after it, float32, from arrays
    that broadcast against each other: the one formula of the reference path (`forget_bias`)
    and of the Pallas kernel's tiles, whose c gradients are its JAX derivatives
    (posjax.kernels.terms.fox)."""
    diff = c_q.astype(jnp.float32) - c_k.astype(jnp.float32)
    return jnp.where(k_pos <= q_pos, diff, -diff)


def forget_bias(c_q: jax.Array, c_k: jax.Array, q_pos: jax.Array, k_pos: jax.Array):
    """[B, H, q, k]: c_i - c_j for keys at or before the query, c_j - c_i after it."""
    return forget_tile(jnp.moveaxis(c_q, -1, 1)[..., :, None],
                       jnp.moveaxis(c_k, -1, 1)[..., None, :],
                       q_pos[:, None, :, None], k_pos[:, None, None, :])


@register
@dataclasses.dataclass(frozen=True)
class Fox(Scheme):
    """Forgetting attention; see the module docstring.

    Fields: gate_bias, the initial b of every head (3.0: f = 0.95 per token, a mild decay
    at init so long-range attention is not cut off before the gates learn).
    """

    name: ClassVar[str] = "fox"
    no_decay: ClassVar[tuple[str, ...]] = ("b",)  # the forget gate's bias: BERT excludes biases

    gate_bias: float = 3.0

    def __post_init__(self):
        if not isinstance(self.gate_bias, (int, float)) or isinstance(self.gate_bias, bool):
            self.fail("gate_bias", self.gate_bias, "a number (initial forget-gate bias)")

    def init_layer(self, rng: jax.Array) -> Params:
        dims = self.bound_dims
        w = 0.02 * jax.random.normal(rng, (dims.num_heads, dims.head_dim), jnp.float32)
        return {"w": w, "b": jnp.full((dims.num_heads,), float(self.gate_bias), jnp.float32)}

    def prepare(self, params, q, k, v, q_pos, k_pos):
        del v, k_pos
        if q.shape[1] != k.shape[1]:
            raise ConfigError("q.shape", q.shape, f"self-attention for position 'fox' (the "
                              f"same {k.shape[1]} tokens as the keys: c is per token)")
        c = forget_cumsum(k, params["w"], params["b"])
        return c, c

    def token_bias(self, params, q_tok, k_tok, q_pos, k_pos):
        del params
        return forget_bias(q_tok, k_tok, q_pos, k_pos)
