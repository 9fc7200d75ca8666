"""Pretraining losses, always in float32 whatever the compute dtype.

- MLM: cross entropy at the masked places, weighted by `mlm_weights`, averaged over the
  weight sum (BERT `get_masked_lm_output`); accuracy likewise. The logits may cover every
  place or only `prediction_positions` (BERT's max_predictions_per_seq gather).
- SOP (ALBERT sentence order): mean cross entropy of `sop_logits` [B, 2] vs `sop_labels`,
  added to the MLM loss with weight 1 when the model returns it.
- Causal LM: position t predicts token t+1 (the shift), scored only where t+1 is a real token
  of the same packed example (segment_ids equal and > 0).
- Algorithmic tasks (`task_logits` of posjax.models.TapeModel): cross entropy at the tape's
  places weighted by `mlm_weights`, averaged over the weight sum; with the reference's
  weights (1 at every output place, posjax.data.tape) that is its loss, the mean over rows
  and output places (experiments/example.py: the sum over classes of -target * log_softmax,
  then the mean). Accuracy is weighted by `accuracy_weights` (the task's mask).

Each function returns (loss, stats) where stats holds SUMS and COUNTS, so evaluation can add
them over batches and divide once (a mean of per-batch means would weight batches wrongly).
"""

from __future__ import annotations

import jax.numpy as jnp
import optax


def top1_correct(logits, targets):
    """1.0 where the target's logit is the largest, else 0.0 (float32, the shape of targets).

    The same answer as `argmax(logits) == targets` except on exact ties for the top, where the
    target counts as right whatever its index (argmax would pick the first tied index). A max
    reduce instead of argmax's (value, index) reduce: several times cheaper over the vocabulary
    on CPU, and the cross entropy's logsumexp already computes this max.
    """
    target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return (target_logit >= logits.max(axis=-1)).astype(jnp.float32)


def _weighted_ce(logits, targets, weights):
    logits = logits.astype(jnp.float32)
    weights = weights.astype(jnp.float32)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    correct = top1_correct(logits, targets)
    return jnp.sum(ce * weights), jnp.sum(correct * weights), jnp.sum(weights)


def prediction_positions(weights, count: int):
    """[B, count] int32: the places of each row with weight > 0, in order, then other places
    (weight 0, so they add nothing). With `count` >= the most predictions a row can have
    (posjax.data.masking.max_predictions) every scored place is kept; `mlm_loss` reports any
    that were not as 'mlm_dropped' so a broken bound can never pass unseen."""
    order = jnp.argsort(weights <= 0, axis=-1, stable=True)
    return order[:, :count].astype(jnp.int32)


def mlm_loss(logits, batch, positions=None):
    """`logits` [B, L, V], or [B, P, V] at `positions` [B, P] (see prediction_positions)."""
    targets, weights = batch["mlm_targets"], batch["mlm_weights"]
    extra = {}
    if positions is not None:
        all_weights = jnp.sum(weights.astype(jnp.float32))
        targets = jnp.take_along_axis(targets, positions, axis=1)
        weights = jnp.take_along_axis(weights, positions, axis=1)
        extra["mlm_dropped"] = all_weights - jnp.sum(weights.astype(jnp.float32))
    loss_sum, correct, count = _weighted_ce(logits, targets, weights)
    return loss_sum / jnp.maximum(count, 1.0), {
        "mlm_loss_sum": loss_sum, "mlm_correct": correct, "mlm_count": count, **extra}


def causal_lm_loss(logits, batch):
    ids = batch["input_ids"]
    seg = batch["segment_ids"]
    targets = ids[:, 1:]
    weights = ((seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)).astype(jnp.float32)
    loss_sum, correct, count = _weighted_ce(logits[:, :-1], targets, weights)
    return loss_sum / jnp.maximum(count, 1.0), {
        "mlm_loss_sum": loss_sum, "mlm_correct": correct, "mlm_count": count}


def task_loss(logits, batch):
    """`logits` [B, L, C] at every place of the tape; targets and weights [B, L]."""
    logits = logits.astype(jnp.float32)
    targets = batch["mlm_targets"]
    weights = batch["mlm_weights"].astype(jnp.float32)
    accuracy_weights = batch["accuracy_weights"].astype(jnp.float32)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    # where(): a weight-0 place (input, padding) adds exactly 0, whatever its logits hold
    loss_sum = jnp.sum(jnp.where(weights > 0, ce * weights, 0.0))
    correct = jnp.sum(jnp.where(accuracy_weights > 0, top1_correct(logits, targets), 0.0)
                      * accuracy_weights)
    count = jnp.sum(weights)
    return loss_sum / jnp.maximum(count, 1.0), {
        "mlm_loss_sum": loss_sum, "mlm_count": count, "mlm_correct": correct,
        "accuracy_count": jnp.sum(accuracy_weights)}


def sop_loss(logits, labels):
    logits = logits.astype(jnp.float32)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    correct = top1_correct(logits, labels)
    n = jnp.asarray(labels.shape[0], jnp.float32)
    return jnp.mean(ce), {"sop_loss_sum": jnp.sum(ce), "sop_correct": jnp.sum(correct), "sop_count": n}


def pretraining_loss(outputs, batch, causal: bool):
    """Total loss and summable stats from the model outputs and the batch."""
    if "task_logits" in outputs:
        loss, stats = task_loss(outputs["task_logits"], batch)
    elif causal:
        loss, stats = causal_lm_loss(outputs["lm_logits"], batch)
    else:
        loss, stats = mlm_loss(outputs["mlm_logits"], batch, outputs.get("mlm_positions"))
    if outputs.get("sop_logits") is not None and "sop_labels" in batch:
        s_loss, s_stats = sop_loss(outputs["sop_logits"], batch["sop_labels"])
        loss = loss + s_loss
        stats.update(s_stats)
    return loss, stats


def summarize(stats) -> dict:
    """Means from summed stats (host side, plain floats)."""
    out = {}
    count = float(stats.get("mlm_count", 0.0))
    if count:
        out["mlm_loss"] = float(stats["mlm_loss_sum"]) / count
        # the task's accuracy has its own places (accuracy_weights); MLM's are the loss's
        scored = float(stats.get("accuracy_count", count))
        out["mlm_accuracy"] = float(stats["mlm_correct"]) / scored if scored else 0.0
    n = float(stats.get("sop_count", 0.0))
    if n:
        out["sop_loss"] = float(stats["sop_loss_sum"]) / n
        out["sop_accuracy"] = float(stats["sop_correct"]) / n
    out["loss"] = out.get("mlm_loss", 0.0) + out.get("sop_loss", 0.0)
    return out
