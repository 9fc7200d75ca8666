"""The seed-aware recovery answer (posjax.evaluation.report.recovery_seeds) on hand-made cells: the
seed mean, the paired differences, the first step within a point of truncate, the files."""

import json
import os

import numpy as np
import pytest

from posjax.evaluation.stats import intervals
from posjax.evaluation.report import recovery_seeds

COUNT = [10, 10, 10, 10, 10, 10]
CLUSTER = [0, 0, 1, 1, 2, 3]
HIER = "hierarchical(alpha=0.4)"


def _cell(correct, *, run="src", label="as_is", length=64, count=COUNT, cluster=CLUSTER):
    rows = {"correct": list(correct), "count": list(count), "loss": [2.0 * c for c in count],
            "cluster": list(cluster)}
    return {"status": "ok", "run": run, "label": label, "length": length, "trained_length": 32,
            "rows": rows}


def _results():
    cells = {"trunc": _cell([8, 8, 8, 8, 8, 8], label="truncate"),
             "orig": _cell([9, 9, 9], label="as_is", length=32, count=[20, 20, 20],
                           cluster=[0, 1, 2]),
             "h0": _cell([2] * 6, run="src", label=HIER), "t0": _cell([1] * 6, label="tile")}
    curves = {}
    # step 4: hierarchical seeds 0 / 1 at 0.5 / 0.7; tile 0.8 / 0.8 (within 1 point of 0.8)
    for label, z, at4 in ((HIER, "h0", (5, 7)), ("tile", "t0", (8, 8))):
        for seed, c in enumerate(at4):
            key = f"{label}{seed}@4"
            cells[key] = _cell([c] * 6, run=f"src+{label}+s{seed}@4")
            curves[f"src|{label}|L=64|constant|seed={seed}"] = {
                "source": "src", "label": label, "length": 64, "seed": seed,
                "schedule": "constant", "tokens_per_step": 64, "cells": {"0": z, "4": key}}
    return {"settings": {"seed": 0}, "cells": cells, "recovery": curves}


def test_seed_means_paired_differences_and_first_step_within_a_point():
    (a,) = recovery_seeds.answer(_results())
    assert (a["source"], a["length"], a["hierarchical"]) == ("src", 64, HIER)
    assert a["truncate"]["accuracy"] == pytest.approx(0.8) and a["clusters"] == 4
    assert a["original"]["accuracy"] == pytest.approx(0.45) and a["original"]["length"] == 32
    h, t = a["methods"][HIER], a["methods"]["tile"]
    assert h["seeds"] == [0, 1] and h["tokens_per_step"] == [64]
    assert h["steps"]["4"]["accuracy"] == pytest.approx(0.6) and h["steps"]["4"]["seeds"] == 2
    assert h["steps"]["0"]["seeds"] == 1  # the zero-shot cell is shared by the seeds
    assert h["steps"]["4"]["minus_truncate"]["accuracy"] == pytest.approx(-0.2)
    # tile minus hierarchical, paired by seed: (0.8 - 0.5 + 0.8 - 0.7) / 2
    d = t["steps"]["4"]["minus_hierarchical"]
    assert d["accuracy"] == pytest.approx(0.2) and d["seeds"] == 2
    assert d["accuracy_lo"] <= 0.2 <= d["accuracy_hi"]
    assert t["steps"]["0"]["minus_hierarchical"]["accuracy"] == pytest.approx(-0.1)
    assert "minus_hierarchical" not in h["steps"]["4"]
    # seeds 0.5 and 0.7 over fewer than 20 clusters: the evaluator's rule for two seeds there
    # is a cluster jackknife of the seed mean (intervals.estimate), named beside the number
    n = h["steps"]["4"]
    assert n["accuracy"] == pytest.approx(0.6) and "jackknife" in n["interval"]
    assert n["accuracy_lo"] <= 0.6 <= n["accuracy_hi"]
    assert (t["within_estimate"], t["within_interval"]) == (4, 4)
    assert (h["within_estimate"], h["within_interval"], h["max_step"]) == (None, None, 4)


def test_one_seed_is_the_cluster_bootstrap_of_results_json():
    results = _results()
    rng = np.random.default_rng(0)
    results["cells"]["trunc"]["rows"]["correct"] = rng.integers(0, 10, 6).tolist()
    (a,) = recovery_seeds.answer(results)
    est, lo, hi = intervals.ratio_interval(results["cells"]["trunc"]["rows"]["correct"], COUNT,
                                           clusters=CLUSTER)
    t = a["truncate"]
    assert (t["accuracy"], t["accuracy_lo"], t["accuracy_hi"]) == pytest.approx((est, lo, hi))


def test_curves_without_their_truncate_cell_give_no_answer_and_no_files(tmp_path):
    results = _results()
    del results["cells"]["trunc"]
    assert recovery_seeds.write(str(tmp_path), results) == []
    assert not os.listdir(tmp_path)


def test_write_puts_the_answer_table_and_figure_beside_results(tmp_path):
    answers = recovery_seeds.write(str(tmp_path), _results())
    with open(tmp_path / recovery_seeds.ANSWER_JSON) as f:
        assert json.load(f) == json.loads(json.dumps(answers))
    md = (tmp_path / recovery_seeds.ANSWER_MD).read_text()
    assert "| tile | 2 | 64 | 4 | 4 |" in md
    assert f"| {HIER} | 2 | 64 | not within 4 steps | not within 4 steps |" in md
    assert f"### minus {HIER}" in md
    assert (tmp_path / recovery_seeds.FIGURE).read_bytes()[:4] == b"\x89PNG"


def test_the_header_folds_degrees_of_freedom_and_identical_differences_say_so():
    from posjax.evaluation.report import recovery_seeds
    from posjax.evaluation.results import results_file

    names = {"cluster jackknife + seed variance t(1.0)", "cluster jackknife + seed variance t(2.5)",
             "cluster jackknife t(46)", "2-level bootstrap (seeds, then clusters)"}
    names.add("cluster jackknife t(2), Wilson over 3 clusters (all equal)")  # kept whole
    assert recovery_seeds._summarized(names) == [
        "2-level bootstrap (seeds, then clusters)", "cluster jackknife t(df), df 46",
        "cluster jackknife + seed variance t(df), df 1-2.5",
        "cluster jackknife t(2), Wilson over 3 clusters (all equal)"]
    draws = recovery_seeds._Draws(np.arange(30) % 10, np.full(30, 3.0), 200, 0)
    zero = np.zeros((2, 10))
    same = recovery_seeds._difference(draws, zero, zero)
    assert same["identical"] and results_file.interval_text(same, "accuracy", True) == \
        results_file.IDENTICAL
    other = recovery_seeds._difference(draws, zero, zero + 0.5)  # same answers, other losses
    assert not other["identical"]


def test_summary_rewrite_writes_the_recovery_answer_from_results_json_alone(tmp_path,
                                                                           monkeypatch):
    from posjax.evaluation import summary

    # the hand-made cells have no tables to write: only the answer is under test here
    monkeypatch.setattr(summary.report, "write_tables", lambda out, results: None)
    monkeypatch.setattr(summary.plots, "write_plots", lambda out, results: [])
    written = summary.rewrite(str(tmp_path), _results())
    assert recovery_seeds.ANSWER_MD in written and recovery_seeds.FIGURE in written
    assert f"### minus {HIER}" in (tmp_path / recovery_seeds.ANSWER_MD).read_text()
