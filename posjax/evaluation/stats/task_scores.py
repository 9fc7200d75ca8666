"""Task scores with 95% intervals: whole-answer exact match and per-token accuracy.

A task row's scored places are exactly its answer tokens (the k key digits, or the masked
half of a copied span), so from the evaluator's per-row sums (posjax.evaluation.run.metrics:
`correct` and `count` per row) a row is an exact match when correct == count. Rows are
independent draws (each its own key and filler). Exact match is a 0/1 outcome per row: its
interval is Wilson's (20/20 is [0.839, 1], never [1, 1]); per-token accuracy and loss are
ratios over rows (posjax.evaluation.stats.intervals.ratio_interval with every row its own cluster:
a bootstrap over >= 20 rows, else a jackknife with t quantiles). `interval` names the exact
match's method, `digit_accuracy_interval` the per-token one.

    rows = from_predictions(predicted_ids, true_ids)       # any predictor, e.g. an oracle
    summary(rows) -> {exact, exact_lo, exact_hi, digit_accuracy, digit_accuracy_lo, ...}
    by_depth(rows, depth) -> [{depth, **summary}, ...]
"""

from __future__ import annotations

import numpy as np

from posjax.evaluation.stats import intervals


def from_predictions(predicted, truth) -> dict:
    """Per-row sums {correct, count} for predicted answer ids [R, k] against the truth."""
    predicted, truth = np.asarray(predicted), np.asarray(truth)
    if predicted.shape != truth.shape or predicted.ndim != 2:
        raise ValueError(f"predictions {predicted.shape} and answers {truth.shape} must both "
                         "be [rows, answer tokens]")
    hits = (predicted == truth).sum(axis=1)
    return {"correct": hits.astype(np.int64).tolist(),
            "count": [int(truth.shape[1])] * truth.shape[0]}


def summary(rows: dict, *, seed: int = 0) -> dict:
    """Exact match and per-token accuracy (and mean loss when `rows` has it) with intervals."""
    correct = np.asarray(rows["correct"], np.float64)
    count = np.asarray(rows["count"], np.float64)
    exact = (correct == count) & (count > 0)
    out = {"rows": int(count.size), "count": int(count.sum())}
    est, lo, hi = intervals.wilson(float(exact.sum()), float((count > 0).sum()))
    out.update(exact=est, exact_lo=lo, exact_hi=hi, interval=intervals.WILSON)
    stats = [("digit_accuracy", correct, count, intervals.proportion_interval)]
    if "loss" in rows:
        stats.append(("loss", np.asarray(rows["loss"], np.float64), count,
                      intervals.ratio_interval))
    for name, num, den, interval in stats:
        est, lo, hi = interval(num, den, seed=seed)
        out.update({name: est, f"{name}_lo": lo, f"{name}_hi": hi})
    out["digit_accuracy_interval"] = row_interval_name(count.size)
    return out


def row_interval_name(rows: int) -> str:
    """The method ratio_interval uses over `rows` independent rows."""
    if rows >= intervals.MIN_CLUSTERS:
        return "bootstrap over rows"
    return f"jackknife over rows t({rows - 1})" if rows >= 2 else "none (one row)"


def by_depth(rows: dict, depth, *, seed: int = 0) -> list[dict]:
    """summary() of the rows at each depth, in depth order."""
    depth = np.asarray(depth, np.float64)
    out = []
    for d in np.unique(depth):
        pick = np.flatnonzero(depth == d)
        part = {k: [rows[k][i] for i in pick] for k in ("correct", "count", "loss") if k in rows}
        out.append({"depth": float(d), **summary(part, seed=seed)})
    return out
