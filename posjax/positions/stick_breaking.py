"""Stick-breaking attention (Tan et al., ICLR 2025, "Scaling Stick-Breaking Attention: An
Efficient Implementation and In-depth Study"): softmax replaced by a stick broken from the
query outward; no position encoding otherwise (the breaking order is the position signal).

With beta_ij = sigmoid(z_ij) (z the scaled logits), query i gives key j < i
    A_ij = beta_ij * prod_{j<k<i} (1 - beta_ik),
the nearest key first: it takes beta of the whole stick, the next one beta of what is left,
and so on. Computed in log space, as the authors do (their reference forward: logsigmoid of
the logits, a cumulative sum of logsigmoid(-z) over the keys between, then exp):
    log A_ij = log_sigmoid(z_ij) + sum_{j<k<i} log_sigmoid(-z_ik)   (every term <= 0).
Attention calls `normalize` on tiles with the keys nearest first and carries each query's
log stick left across key blocks (posjax/tiling/sides.py, chunked.py), so long inputs stay
O(L x block) in memory.

Where posjax follows the authors' code (shawntan/stickbreaking-attention) and where not:
  * the diagonal: the paper's keys are those before the current token and the kernel's
    default (`attend_current=False`) excludes the query's own token; `attend_current=True`
    (the kernel's option) breaks the stick at the query's own token first.
  * the remaining stick 1 - sum_j A_ij: the kernel returns it beside the output, which is
    sum_j A_ij v_j alone (its tests leave the remainder unused), so the remainder attends to
    nothing; so here. The authors' model code (IBM Dolomite) can add remainder * a learned
    per-head vector and normalizes the heads' outputs (GroupNorm); posjax does neither.
  * order: the stick is broken in array order (reversed for the keys before the query),
    which is the order of positions within an example, packed or padded (other examples and
    padding are masked and break nothing). Positions enter nowhere else, so shifting them
    all changes nothing.

Encoders (bidirectional attention; the paper is causal only): two sticks from the query, one
broken leftwards over the keys before it and one rightwards over the keys after it, each of
length one half, so every query's weights still sum to at most 1 and the remainder keeps its
meaning (attention given to nothing). With `attend_current` the query's own key is the
nearest on both sides: it takes beta_ii (half on each) and the two halves share 1 - beta_ii.
Halves, rather than normalizing by the two sticks' total, keep a key's weight a function of
the logits between it and the query alone, as in the causal form, and need no parameter.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax.numpy as jnp

from posjax.positions.base import Scheme
from posjax.positions.prefix import prefix_sum
from posjax.positions.registry import register


@register
@dataclasses.dataclass(frozen=True)
class StickBreaking(Scheme):
    """Stick-breaking attention in place of softmax; see the module docstring.

    Fields: attend_current (False, as the authors' kernel: the query's own key gets no
    weight; True: the stick breaks at it first).
    """

    name: ClassVar[str] = "stick_breaking"

    attend_current: bool = False

    def __post_init__(self):
        if not isinstance(self.attend_current, bool):
            self.fail("attend_current", self.attend_current,
                      "True or False (whether the stick breaks at the query's own key first)")

    def normalize(self, params, logits, mask, carry, q_pos, k_pos, sides):
        """Weights of one side's tile, keys nearest first: beta_ij times the stick left after
        the nearer keys of this tile and the carry (log of the stick left after the nearer
        tiles); the weights are halved when the query has two sides."""
        del params
        if not self.attend_current:
            mask = mask & (k_pos[:, None, :] != q_pos[:, :, None])[:, None]
        # log_sigmoid(+-z) = -(max(-+z, 0) + log1p(exp(-|z|))): both from one exp and log1p
        shared = jnp.log1p(jnp.exp(-jnp.abs(logits)))
        log_beta = jnp.where(mask, -(jnp.maximum(-logits, 0.0) + shared), 0.0)
        log_rest = jnp.where(mask, -(jnp.maximum(logits, 0.0) + shared), 0.0)  # log(1 - beta)
        # The stick left before key j: log(1 - beta) of the keys nearer than j.
        nearer = prefix_sum(log_rest, exclusive=True)
        log_w = carry[..., None] + nearer + log_beta  # <= 0: exp never overflows
        weights = jnp.where(mask, jnp.exp(log_w), 0.0) / sides
        return weights, carry + log_rest.sum(-1)
