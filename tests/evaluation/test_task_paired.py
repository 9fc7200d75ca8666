"""Paired task differences from --baseline (posjax.evaluation.derive.task_pairs), on
synthetic cells."""

from posjax.evaluation.stats import intervals
from posjax.evaluation.derive import task_pairs as paired
from posjax.evaluation.report.tasks import tables
from posjax.evaluation.stats import task_scores as scoring


def _cell(method, correct, *, task="passkey", length=64, count=None, alpha=None):
    count = count or [2] * len(correct)
    params = {"alpha": alpha} if alpha is not None else {}
    rows = {"correct": correct, "count": count, "depth": [0.0] * len(correct),
            "distance": [5] * len(correct)}
    return {"run": "r", "task": task, "length": length, "method": method, "params": params,
            "label": method if alpha is None else f"{method}(alpha={alpha})", "status": "ok",
            "rows": rows, "overall": scoring.summary(rows),
            "depths": scoring.by_depth(rows, rows["depth"])}


def _results(cells, baseline="as_is"):
    return {"settings": {"baseline": baseline, "seed": 0},
            "tasks": {str(i): c for i, c in enumerate(cells)}}


def test_exact_and_per_token_differences_over_the_same_rows():
    base = _cell("as_is", [2, 2, 0, 1, 2, 0, 0, 2])   # exact 4/8, tokens 9/16
    other = _cell("ntk", [2, 2, 2, 2, 2, 1, 0, 2])    # exact 6/8, tokens 13/16
    (d,) = paired.differences(_results([base, other]), "as_is")
    assert d["label"] == "ntk" and d["baseline"] == "as_is" and d["length"] == 64
    assert abs(d["exact"] - 0.25) < 1e-12 and abs(d["digit_accuracy"] - 0.25) < 1e-12
    # exact match: Newcombe's paired score interval from the 2 x 2 table of the rows
    assert d["interval"] == "Newcombe paired score"
    assert (d["exact_lo"], d["exact_hi"]) == intervals.paired_proportions(
        [1, 1, 1, 1, 1, 0, 0, 1], [1, 1, 0, 0, 1, 0, 0, 1])[1:]
    assert d["exact_lo"] < d["exact"] < d["exact_hi"]
    assert d["digit_accuracy_interval"] == "jackknife over rows t(7)"
    assert d["digit_accuracy_lo"] < d["digit_accuracy"] < d["digit_accuracy_hi"]
    md = tables.to_markdown(_results([base, other]))
    assert "## passkey: minus as_is (paired, same rows, 1 seed; exact: Newcombe" in md
    assert "| r | ntk | 64 | +0.250 [" in md


def test_cells_are_paired_only_within_one_run_length_and_task_on_equal_rows():
    cells = [_cell("as_is", [2, 0]), _cell("ntk", [2, 2]),
             _cell("ntk", [2, 2], length=128),                 # no baseline at 128
             _cell("yarn", [2, 2, 2], count=[2, 2, 2]),        # other rows: not paired
             _cell("as_is", [1, 1], task="copy_span"), _cell("ntk", [2, 1], task="copy_span")]
    diffs = paired.differences(_results(cells), "as_is")
    assert sorted((d["task"], d["label"], d["length"]) for d in diffs) == [
        ("copy_span", "ntk", 64), ("passkey", "ntk", 64)]
    assert paired.differences(_results(cells), None) == []
    assert "minus" not in tables.to_markdown(_results(cells, baseline=None))


def test_longdoc_pairs_accuracy_and_loss_over_documents():
    def doc(correct):
        c = _cell("as_is", correct, task="longdoc", count=[10] * 6)
        c["rows"].update(loss=[20.0] * 6, cluster=[0, 1, 2, 3, 4, 5])
        del c["rows"]["depth"], c["rows"]["distance"]
        return c

    a, b = doc([5] * 6), doc([4] * 6)
    b["method"] = b["label"] = "yarn"
    (d,) = paired.differences(_results([a, b]), "as_is")
    assert abs(d["accuracy"] + 0.1) < 1e-12 and d["loss"] == 0.0


def test_task_cells_of_several_seeds_are_one_row_with_their_mean():
    from posjax.evaluation import derive

    results = {"settings": {"seed": 0}, "runs": {}, "cells": {}, "tasks": {}}
    for s, correct in enumerate(([2] * 20 + [0] * 5, [2] * 15 + [0] * 10, [2] * 25)):
        key = f"w/r_seed{s}@4"
        results["runs"][key] = {"name": f"r_seed{s}", "step": 4, "config": {"seed": s}}
        c = _cell("as_is", correct)
        c["run"] = f"r_seed{s}"
        results["tasks"][f"{key}|as_is|L=64|passkey|h"] = c
    derive.derive(results)
    (g,) = results["task_seed_cells"].values()
    assert g["run"] == "r" and g["n_seeds"] == 3 and g["seeds"] == [0, 1, 2]
    assert abs(g["overall"]["exact"] - (20 + 15 + 25) / 75) < 1e-12
    # 20/25, 15/25, 25/25: the t interval over the seed means reaches past 1 and is cut there
    assert g["overall"]["interval"] == "t over seed means, clipped to [0, 1]"
    assert g["overall"]["exact_lo"] < g["overall"]["exact"] < g["overall"]["exact_hi"] == 1.0
    assert [d["depth"] for d in g["depths"]] == [0.0]
    md = tables.to_markdown(results)
    assert "| r | 3 seeds (0, 1, 2) | as_is | 64 |" in md and "r_seed1" not in md
