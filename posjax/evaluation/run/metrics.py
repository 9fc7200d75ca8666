"""Per-token scores from one jitted forward pass, and their sums per position bucket.

The device returns, per scored place, the loss, whether the target's logit is the largest
(argmax == target), the weight (1 where a prediction is scored) and the place's column in the
row; the host sums them per bucket. An
MLM scores only its masked places (the LM head runs there alone, as in training), a causal LM
every place. Sums and counts, never means of means,
so buckets and batches add up exactly: sum(bucket counts) == overall count. The Accumulator
also keeps the sums of every ROW (loss, correct, count), which the intervals resample
(posjax.evaluation.stats.intervals).

Buckets (positions in the evaluated row, 0-based, T = trained length):
  [0, T), [T, 2T), [2T, 4T), [4T, 8T), ...  -- the first bucket is the trained range, each
  later one doubles, so a curve shows at once how far past T a method holds up.
MLM: a masked token is scored at its own position. Causal LM: the prediction made at position
t (of token t+1) is scored at t, so bucket [0, T) holds contexts of at most T tokens.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from posjax.training.losses import top1_correct
from posjax.training.state import to_params_state, with_prediction_positions
from posjax import schema


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


class Scores(NamedTuple):
    """What the scorer returns for one batch: one entry per SCORED PLACE of each row.

    MLM: the P = max_predictions places gathered per row (training's bound), so the LM head's
    [B, P, V] logits replace [B, L, V]; causal LM: every place (P = L). Entries past a row's
    predictions have weight 0 (and loss/correct 0), so they add nothing to any sum.
    """

    loss: Any  # [B, P] float32, cross entropy * weight
    correct: Any  # [B, P] float32, (argmax == target) * weight
    weight: Any  # [B, P] float32, 1 where the place is scored
    place: Any  # [B, P] int32, the place's column in the row (what the buckets count)
    dropped: Any  # [] int32, scored places outside the P gathered (must be 0)


def make_scorer(graphdef: Any, treedef: Any, config: Any) -> Callable:
    """jit(params, batch) -> Scores.

    The model runs as in the training step's eval (posjax.training.state.make_eval_step):
    for an MLM, `with_prediction_positions` picks the masked places (bounded by
    posjax.data.masking.max_predictions for config.data.mask_rate) and the model gathers the
    hidden states there before its LM head (BERT's gather_indexes), so at 8192 tokens the
    vocabulary-sized logits cover ~15% of the row. `dropped` > 0 means a row had more
    predictions than that bound; Accumulator.add refuses such a batch rather than lose them.
    For causal models the targets are the ORIGINAL next tokens and every position but the
    last is scored, whatever the segment ids (truncate windows cut the context, not the
    targets); nothing is gathered. `batch` follows the data contract (+ 'original_ids' and
    'real' for causal models, see batches.for_method).
    """
    causal = bool(schema.view(config).model.causal)

    def score(params, batch):
        model = nnx.merge(graphdef, to_params_state(treedef, params))
        ids = batch["input_ids"]
        columns = jnp.broadcast_to(jnp.arange(ids.shape[1], dtype=jnp.int32), ids.shape)
        if causal:
            logits = model(batch, deterministic=True)["lm_logits"]
            ids = batch["original_ids"]
            targets = jnp.concatenate([ids[:, 1:], jnp.zeros_like(ids[:, :1])], axis=1)
            weights = jnp.concatenate(
                [batch["real"][:, 1:], jnp.zeros_like(batch["real"][:, :1])], axis=1)
            place, dropped = columns, jnp.zeros((), jnp.int32)
        else:
            if "mlm_positions" not in batch:  # the evaluator passes its own (batches.py)
                batch = with_prediction_positions(config, batch)
            out = model(batch, deterministic=True)
            logits = out["mlm_logits"]
            targets, weights = batch["mlm_targets"], batch["mlm_weights"]
            scored = jnp.sum(weights > 0)  # counted, not summed: exact whatever the weights
            place = out.get("mlm_positions")
            if place is None:  # rows too short for the bound to save anything
                place = columns
            else:
                targets = jnp.take_along_axis(targets, place, axis=1)
                weights = jnp.take_along_axis(weights, place, axis=1)
            dropped = scored - jnp.sum(weights > 0)
        logits = logits.astype(jnp.float32)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
        correct = top1_correct(logits, targets)  # argmax == target, ties count as right
        w = weights.astype(jnp.float32)
        return Scores(loss * w, correct * w, w, place.astype(jnp.int32), dropped)

    return jax.jit(score)


class Accumulator:
    """Host-side sums per bucket for one cell."""

    def __init__(self, edges: list[int]):
        self.edges = edges
        n = len(edges) - 1
        self.loss = np.zeros(n, np.float64)
        self.correct = np.zeros(n, np.float64)
        self.count = np.zeros(n, np.float64)
        self.row_loss: list[np.ndarray] = []
        self.row_correct: list[np.ndarray] = []
        self.row_count: list[np.ndarray] = []

    def add(self, loss: np.ndarray, correct: np.ndarray, weight: np.ndarray,
            place: Optional[np.ndarray] = None, dropped: int = 0, *,
            rows: Optional[int] = None) -> None:
        """Arrays [B, P] (already zero where weight is 0), e.g. `acc.add(*scores)`; `place`
        [B, P] is each entry's column in the row (None: entry j is column j). `rows`: how
        many leading rows are real (the rest pad a batch; their weights are 0)."""
        if int(dropped) > 0:
            raise RuntimeError(
                f"{int(dropped)} masked tokens of this batch fell outside the places the "
                "MLM head scores (posjax.data.masking.max_predictions is meant to bound every "
                "row for data.mask_rate); refusing to drop them: this is a bug in posjax, "
                "please report it with the data config")
        weight = np.asarray(weight)
        keep = slice(0, weight.shape[0] if rows is None else int(rows))
        for store, values in ((self.row_loss, loss), (self.row_correct, correct),
                              (self.row_count, weight)):
            store.append(np.asarray(values, np.float64)[keep].sum(axis=-1))
        if place is None:
            place = np.broadcast_to(np.arange(weight.shape[-1]), weight.shape)
        n = len(self.edges) - 1
        bucket = np.searchsorted(self.edges, np.asarray(place), side="right").ravel() - 1
        bucket = np.clip(bucket, 0, n - 1)
        for total, values in ((self.loss, loss), (self.correct, correct), (self.count, weight)):
            total += np.bincount(bucket, weights=np.asarray(values, np.float64).ravel(), minlength=n)

    def rows(self) -> dict:
        """Per-row sums {loss, correct, count} as lists (JSON-ready; loss to 7 digits)."""
        cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0)  # noqa: E731
        return {"loss": [float(f"{x:.7g}") for x in cat(self.row_loss)],
                "correct": [int(round(x)) for x in cat(self.row_correct)],
                "count": [int(round(x)) for x in cat(self.row_count)]}

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
