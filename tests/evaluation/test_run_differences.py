"""posjax/evaluation/report/run_differences.py: paired differences between runs of one results.json
(pure numpy)."""

from __future__ import annotations

import pytest

from posjax.evaluation.report import run_differences


def _cell(run, correct, length=64, label="as_is", cluster=None):
    count = [10] * len(correct)
    return {"status": "ok", "run": run, "label": label, "length": length,
            "overall": {"accuracy": sum(correct) / sum(count)},
            "rows": {"correct": correct, "count": count, "loss": [2.0] * len(correct),
                     "cluster": cluster or list(range(len(correct)))}}


def test_pairs_runs_on_the_same_rows():
    a = _cell("modern", [5, 6, 7, 8, 9, 5])
    b = _cell("rope", [4, 5, 6, 7, 8, 4])
    results = {"cells": {"k1": a, "k2": b, "k3": _cell("rope", [1] * 6, label="yarn")}}
    [r] = run_differences.differences(results, [("modern", "rope")], ["as_is", "yarn"])
    assert (r["a"], r["b"], r["length"]) == ("modern", "rope", 64)
    assert r["accuracy"] == pytest.approx(0.1)  # one more correct in every row of 10
    assert r["accuracy_lo"] == pytest.approx(0.1) and r["accuracy_hi"] == pytest.approx(0.1)
    assert r["loss"] == pytest.approx(0.0)
    text = run_differences.to_markdown([r])
    assert "| modern - rope | as_is | +0.1000 [+0.1000, +0.1000] |" in text
    assert "95% intervals: cluster jackknife t(5)" in text  # 6 documents: the evaluator's rule


def test_refuses_different_streams():
    a = _cell("modern", [5] * 6)
    b = _cell("rope", [5] * 6, cluster=[0, 0, 1, 1, 2, 2])
    with pytest.raises(ValueError, match="different documents"):
        run_differences.differences({"cells": {"a": a, "b": b}}, [("modern", "rope")], ["as_is"])
