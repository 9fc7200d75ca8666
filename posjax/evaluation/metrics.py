"""Per-token scores from one jitted forward pass, and their sums per position bucket.

The device returns, per token, the loss, whether the argmax is right and the weight (1 where a
prediction is scored); the host sums them per bucket. Sums and counts, never means of means,
so buckets and batches add up exactly: sum(bucket counts) == overall count.

Buckets (positions in the evaluated row, 0-based, T = trained length):
  [0, T), [T, 2T), [2T, 4T), [4T, 8T), ...  -- the first bucket is the trained range, each
  later one doubles, so a curve shows at once how far past T a method holds up.
MLM: a masked token is scored at its own position. Causal LM: the prediction made at position
t (of token t+1) is scored at t, so bucket [0, T) holds contexts of at most T tokens.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx


def bucket_edges(trained_length: int, length: int) -> list[int]:
    """Edges e_0=0 < e_1=T < 2T < 4T ... ending at `length` (buckets [e_i, e_i+1))."""
    edges = [0]
    upper = trained_length
    while upper < length:
        edges.append(upper)
        upper *= 2
    edges.append(length)
    return edges


def bucket_label(lo: int, hi: int) -> str:
    return f"{lo}-{hi - 1}"


def make_scorer(graphdef: Any, treedef: Any, causal: bool) -> Callable:
    """jit(params, batch) -> (loss [B, L], correct [B, L], weight [B, L]) float32.

    Only the encoder and the tied LM head run (no SOP head); `batch` follows the data
    contract. For causal models the targets are the ORIGINAL next tokens and every position
    but the last is scored, whatever the segment ids (truncate windows cut the context,
    not the targets).
    """
    from posjax.training.state import to_params_state

    def score(params, batch):
        model = nnx.merge(graphdef, to_params_state(treedef, params))
        h = model.encoder(batch, deterministic=True)
        logits = model.lm_head(h, model.encoder.embeddings.word).astype(jnp.float32)
        if causal:
            ids = batch["original_ids"]
            targets = jnp.concatenate([ids[:, 1:], jnp.zeros_like(ids[:, :1])], axis=1)
            weights = jnp.concatenate(
                [batch["real"][:, 1:], jnp.zeros_like(batch["real"][:, :1])], axis=1)
        else:
            targets, weights = batch["mlm_targets"], batch["mlm_weights"]
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
        correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
        w = weights.astype(jnp.float32)
        return loss * w, correct * w, w

    return jax.jit(score)


class Accumulator:
    """Host-side sums per bucket for one cell."""

    def __init__(self, edges: list[int]):
        self.edges = edges
        n = len(edges) - 1
        self.loss = np.zeros(n, np.float64)
        self.correct = np.zeros(n, np.float64)
        self.count = np.zeros(n, np.float64)

    def add(self, loss: np.ndarray, correct: np.ndarray, weight: np.ndarray) -> None:
        """Arrays [B, L] (already zero where weight is 0)."""
        for b, (lo, hi) in enumerate(zip(self.edges[:-1], self.edges[1:])):
            self.loss[b] += float(np.sum(loss[:, lo:hi], dtype=np.float64))
            self.correct[b] += float(np.sum(correct[:, lo:hi], dtype=np.float64))
            self.count[b] += float(np.sum(weight[:, lo:hi], dtype=np.float64))

    def summary(self, causal: bool) -> dict:
        """Overall and per-bucket numbers; perplexity for causal models."""

        def numbers(loss, correct, count):
            out = {"count": int(round(count)), "loss_sum": loss, "correct": int(round(correct))}
            out["loss"] = loss / count if count else None
            out["accuracy"] = correct / count if count else None
            if causal:
                out["perplexity"] = math.exp(out["loss"]) if count else None
            return out

        overall = numbers(float(self.loss.sum()), float(self.correct.sum()), float(self.count.sum()))
        buckets = []
        for b, (lo, hi) in enumerate(zip(self.edges[:-1], self.edges[1:])):
            row = numbers(float(self.loss[b]), float(self.correct[b]), float(self.count[b]))
            buckets.append({"bucket": bucket_label(lo, hi), "start": lo, "end": hi, **row})
        return {"overall": overall, "buckets": buckets}
