"""Paired task differences from a baseline method (eval.py --baseline): for every task cell,
its score minus the baseline method's on the SAME rows (the same keys, filler and masks: every
method of a (run, length, task) scores one generated set), with a 95% bootstrap interval of
the difference. Retrieval tasks resample rows (each row is its own draw) and pair exact match
and per-token accuracy; longdoc pairs accuracy and loss and resamples documents like its
cells do (posjax.evaluation.intervals.paired)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from posjax.evaluation import intervals

RETRIEVAL_METRICS = ("exact", "digit_accuracy")
LONGDOC_METRICS = ("accuracy", "loss")


def _ok(c: dict) -> bool:
    return c.get("status") == "ok" and "rows" in c


def _same_rows(a: dict, b: dict) -> bool:
    ra, rb = a["rows"], b["rows"]
    return all(np.array_equal(np.asarray(ra.get(k, [])), np.asarray(rb.get(k, [])))
               for k in ("count", "depth", "distance", "cluster"))


def difference(a: dict, b: dict, *, seed: int = 0) -> Optional[dict]:
    """a - b for two ok cells of one task over the same rows; None if the rows differ."""
    if not (_ok(a) and _ok(b)) or not _same_rows(a, b):
        return None
    if a["task"] == "longdoc":
        return intervals.paired(a["rows"], b["rows"], seed=seed)
    ca, cb = (np.asarray(c["rows"]["correct"], np.float64) for c in (a, b))
    count = np.asarray(a["rows"]["count"], np.float64)
    asked = (count > 0).astype(np.float64)
    out = {"resampled": "rows"}
    for name, num_a, num_b, den in (
            ("exact", (ca == count) * asked, (cb == count) * asked, asked),
            ("digit_accuracy", ca, cb, count)):
        est, lo, hi = intervals.difference_interval(num_a, num_b, den, seed=seed)
        out.update({name: est, f"{name}_lo": lo, f"{name}_hi": hi})
    return out


def _is_baseline(c: dict, baseline: str) -> bool:
    p = c.get("params", {})
    return c["method"] == baseline and not p.get("logn") and not p.get("shuffle_positions")


def differences(results: dict, baseline: Optional[str]) -> list[dict]:
    """[{run, task, length, label, baseline, **difference}] for every task cell that has a
    baseline cell of the same (run, length, task) and is not that cell."""
    if not baseline:
        return []
    seed = int(results.get("settings", {}).get("seed") or 0)
    groups: dict = {}
    for c in results.get("tasks", {}).values():
        groups.setdefault((c["run"], c["task"], c["length"]), []).append(c)
    out = []
    for (run, task, length), cells in sorted(groups.items()):
        base = sorted((c.get("params", {}).get("alpha") or 0, i) for i, c in enumerate(cells)
                      if _is_baseline(c, baseline) and _ok(c))
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
