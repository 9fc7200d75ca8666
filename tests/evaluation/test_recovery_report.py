"""The recovery section: one table per curve, and the paired difference between two methods
continued from the same run at the same length (synthetic cells; no training)."""

from posjax.evaluation.stats import intervals
from posjax.evaluation.report.recovery_report import recovery_markdown


def _cell(correct, count, loss, cluster):
    rows = {"correct": list(correct), "count": list(count), "loss": list(loss),
            "cluster": list(cluster)}
    return {"status": "ok", "rows": rows, "overall": intervals.summarize(rows)}


def _curve(label):
    return {"source": "run", "length": 64, "label": label,
            "cells": {"0": f"{label}0", "5": f"{label}5"}}


def _results(b_correct):
    count, cluster = [10, 10, 10, 10], [0, 0, 1, 2]
    cells = {"a0": _cell([2, 3, 2, 3], count, [40] * 4, cluster),
             "a5": _cell([6, 7, 6, 7], count, [30] * 4, cluster),
             "b0": _cell([1, 1, 1, 1], count, [45] * 4, cluster),
             "b5": _cell(b_correct, count[:len(b_correct)], [35] * len(b_correct),
                         cluster[:len(b_correct)])}
    return {"settings": {"seed": 0}, "cells": cells,
            "recovery": {"run|a|64": _curve("a"), "run|b|64": _curve("b")}}


def test_paired_rows_show_the_difference_with_its_interval():
    md = "\n".join(recovery_markdown(_results([4, 4, 4, 4])))
    assert "## Recovery: run at length 64, continued training with a" in md
    assert "## Recovery: a minus b (run, length 64, paired, same rows, 1 seed)" in md
    paired = md.split("a minus b")[1]
    row0 = next(l for l in paired.splitlines() if l.startswith("| 0 |"))
    row5 = next(l for l in paired.splitlines() if l.startswith("| 5 |"))
    assert row0.split("|")[2].strip().startswith("+0.1500")  # 0.25 - 0.10
    assert row5.split("|")[2].strip().startswith("+0.2500")  # 0.65 - 0.40
    d = intervals.paired(_results([4] * 4)["cells"]["a5"]["rows"],
                         _results([4] * 4)["cells"]["b5"]["rows"])
    assert d["accuracy_lo"] <= 0.25 <= d["accuracy_hi"] and d["loss"] == -0.5


def test_steps_whose_rows_differ_are_left_out_not_paired():
    md = "\n".join(recovery_markdown(_results([4, 4, 4])))
    paired = md.split("a minus b")[1]
    assert "| 0 |" in paired and "| 5 |" not in paired
