"""Paired task differences from a baseline method (eval.py --baseline): for every task cell,
its score minus the baseline method's on the SAME rows (the same keys, filler and masks: every
method of a (run, length, task) scores one generated set), with a 95% interval of the
difference. Retrieval tasks pair exact match with Newcombe's paired score interval (the 0/1
outcomes of both methods on each row; `interval`) and per-token accuracy over rows (each row
its own draw: bootstrap over >= 20 rows, else jackknife t; `digit_accuracy_interval`);
longdoc pairs accuracy and loss over documents like its cells do
(posjax.evaluation.stats.intervals.paired)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from posjax.evaluation.derive import seeds as seeds_lib
from posjax.evaluation.results.results_file import interval_seed, section
from posjax.evaluation.stats import intervals
from posjax.evaluation.stats import task_scores as scoring

RETRIEVAL_METRICS = ("exact", "digit_accuracy")
LONGDOC_METRICS = ("accuracy", "loss")


def _same_rows(a: dict, b: dict) -> bool:
    ra, rb = a["rows"], b["rows"]
    # depth, distance, cluster: optional (record.TaskRows); both absent is the same rows
    return all(ra.get(k) == rb.get(k) for k in ("count", "depth", "distance", "cluster"))


def difference(a: dict, b: dict, *, seed: int = 0) -> Optional[dict]:
    """a - b for two ok cells of one task over the same rows; None if the rows differ."""
    if not (seeds_lib.has_rows(a) and seeds_lib.has_rows(b)) or not _same_rows(a, b):
        return None
    if a["task"] == "longdoc":
        return intervals.paired(a["rows"], b["rows"], seed=seed)
    ca, cb = (np.asarray(c["rows"]["correct"], np.float64) for c in (a, b))
    count = np.asarray(a["rows"]["count"], np.float64)
    asked = (count > 0).astype(np.float64)
    out = {"resampled": "rows"}
    keep = asked > 0
    est, lo, hi = intervals.paired_proportions((ca == count)[keep], (cb == count)[keep])
    out.update(exact=est, exact_lo=lo, exact_hi=hi, interval=intervals.NEWCOMBE)
    est, lo, hi = intervals.difference_interval(ca, cb, count, seed=seed)
    out.update(digit_accuracy=est, digit_accuracy_lo=lo, digit_accuracy_hi=hi,
               digit_accuracy_interval=scoring.row_interval_name(count.size))
    return out


def _is_baseline(c: dict, baseline: str) -> bool:
    p = c["params"]
    return c["method"] == baseline and not p.get("logn") and not p.get("shuffle_positions")


def differences(results: dict, baseline: Optional[str]) -> list[dict]:
    """[{run, task, length, label, baseline, **difference}] for every task cell that has a
    baseline cell of the same (run, length, task) and is not that cell."""
    if not baseline:
        return []
    seed = interval_seed(results)
    groups: dict = {}
    for c in section(results, "tasks").values():
        groups.setdefault((c["run"], c["task"], c["length"]), []).append(c)
    out = []
    for (run, task, length), cells in sorted(groups.items()):
        base = sorted((c["params"].get("alpha") or 0, i) for i, c in enumerate(cells)
                      if _is_baseline(c, baseline) and seeds_lib.has_rows(c))
        if not base:
            continue
        b = cells[base[0][1]]
        for c in cells:
            if c is b:
                continue
            d = difference(c, b, seed=seed)
            if d is not None:
                out.append(dict(d, run=run, task=task, length=length, label=c["label"],
                                baseline=b["label"]))
    return out
