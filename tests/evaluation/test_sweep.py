"""The sweep on a tiny trained checkpoint: output schema, the same masked tokens at every
length and for every method, per-row sums, bucket sums, hierarchical == learned inside the
table, not_applicable cells, resumability, old results refused."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest

from posjax.errors import ConfigError
from posjax.evaluation.run import batches, restore
from posjax.evaluation import driver
from posjax.evaluation.report import report
from posjax.evaluation.results import results_file
from posjax.evaluation.run import sweep as sweep_lib
from tests.evaluation.conftest import LENGTHS, MASKED, TRAINED, cell, sweep_request

# Slow tier: trains the tiny evaluation model (session fixture) and sweeps it.
pytestmark = pytest.mark.slow

CELL_KEYS = {"run", "workdir", "step", "scheme", "trained_length", "causal", "method", "label",
             "params", "length", "seed", "status"}
NUMBERS = {"count", "correct", "loss_sum", "loss", "accuracy"}
INTERVALS = {"accuracy_lo", "accuracy_hi", "loss_lo", "loss_hi", "rows", "clusters"}


def test_output_files_and_schema(sweep, trained_workdir):
    out, results = sweep
    for name in ("results.json", "results.csv", "results.md", "accuracy_vs_length.png"):
        assert os.path.getsize(os.path.join(out, name)) > 0, name
    with open(os.path.join(out, "results.json")) as f:
        saved = json.load(f)
    assert saved["schema"] == results_file.SCHEMA
    assert {"jax", "flax", "numpy", "python"} <= set(saved["versions"])
    assert saved["settings"]["lengths"] == LENGTHS
    ((key, run),) = saved["runs"].items()
    assert run["scheme"] == "learned" and run["trained_length"] == TRAINED
    # workdirs relative to the results folder, so it can be moved with its tree or committed
    assert not os.path.isabs(run["workdir"]) and key == f"{run['workdir']}@{run['step']}"
    assert os.path.samefile(os.path.join(out, run["workdir"]), trained_workdir)
    assert all(k.startswith(key + "|") and c["workdir"] == run["workdir"]
               for k, c in saved["cells"].items())
    assert run["config"]["position"]["name"] == "learned"
    # as_is + hierarchical(alpha=0.4) per length, + as_is with shuffled positions at T
    assert len(saved["cells"]) == len(LENGTHS) * 2 + 1
    for c in saved["cells"].values():
        assert CELL_KEYS <= set(c)
        if c["status"] == "ok":
            assert NUMBERS | INTERVALS <= set(c["overall"])
            o = c["overall"]
            # (row sums are stored to 7 digits: the estimate may sit 1e-7 off the bootstrap)
            assert o["accuracy_lo"] - 1e-6 <= o["accuracy"] <= o["accuracy_hi"] + 1e-6
            assert o["loss_lo"] - 1e-6 <= o["loss"] <= o["loss_hi"] + 1e-6
            assert all(NUMBERS | {"bucket", "start", "end"} <= set(b) for b in c["buckets"])
            # per-row sums: one entry per row, adding up to the overall sums
            rows = c["rows"]
            assert len(rows["loss"]) == len(rows["correct"]) == len(rows["count"]) == len(
                rows["cluster"]) == o["rows"] > 0
            assert sum(rows["count"]) == o["count"] and sum(rows["correct"]) == o["correct"]
            np.testing.assert_allclose(sum(rows["loss"]), o["loss_sum"], rtol=1e-5)
            assert c["crossing_rows"] >= 0
        else:
            assert c["status"] == "not_applicable" and c["reason"]
    with open(os.path.join(out, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0].keys()) == report.CSV_FIELDS
    ok = [c for c in saved["cells"].values() if c["status"] == "ok"]
    na = [c for c in saved["cells"].values() if c["status"] != "ok"]
    assert len(rows) == sum(1 + len(c["buckets"]) for c in ok) + len(na)
    md = open(os.path.join(out, "results.md")).read()
    assert "| hierarchical(alpha=0.4) |" in md and "n/a" in md
    assert "position reliance at L=16" in md and "minus as_is (paired" in md
    ((run_key, reliance),) = saved["reliance"].items()
    assert run_key == key and reliance["length"] == TRAINED
    assert reliance["accuracy_lo"] <= reliance["accuracy"] <= reliance["accuracy_hi"]
    # differences from the baseline: hierarchical inside the table is as_is exactly
    for k, d in saved["differences"].items():
        c = saved["cells"][d["a"]]  # a 1-seed group's seed cells keep the run's cell keys
        assert k == f"{d['a']} - {d['b']}" and d["kind"] == "baseline"
        assert d["baseline"] == "as_is" and c["method"] == "hierarchical"
        assert d["accuracy"] == d["accuracy_lo"] == d["accuracy_hi"] == 0.0
        assert d["n_seeds"] == 1 and d["seeds"] == [0] and d["interval"]
    assert "1 seed" in md and "95% intervals:" in md
    for c in ok:
        assert c["n_seeds"] == 1 and c["seeds"] == [0] and c["interval"] == c["overall"][
            "interval"]


def test_learned_table_past_its_rows_is_not_applicable(cells):
    c = cell(cells, "as_is", 2 * TRAINED)
    assert c["status"] == "not_applicable"
    assert "rows" in c["reason"] and str(2 * TRAINED) in c["reason"]
    assert cell(cells, "hierarchical", 2 * TRAINED)["status"] == "ok"


def test_bucket_counts_add_up(cells):
    for c in cells:
        if c["status"] != "ok":
            continue
        b = c["buckets"]
        assert sum(x["count"] for x in b) == c["overall"]["count"] > 0
        assert sum(x["correct"] for x in b) == c["overall"]["correct"]
        np.testing.assert_allclose(sum(x["loss_sum"] for x in b), c["overall"]["loss_sum"], rtol=1e-9)
        assert b[0]["start"] == 0 and b[-1]["end"] == c["length"]
    # at 2T the buckets are the trained range and the range beyond it
    assert [x["bucket"] for x in cell(cells, "hierarchical", 2 * TRAINED)["buckets"]] == [
        f"0-{TRAINED - 1}", f"{TRAINED}-{2 * TRAINED - 1}"]


def test_hierarchical_equals_learned_exactly_inside_the_table(cells):
    for length in (TRAINED // 2, TRAINED):
        a, h = cell(cells, "as_is", length), cell(cells, "hierarchical", length)
        assert a["status"] == h["status"] == "ok"
        assert a["overall"] == h["overall"]  # the same floats, not merely close
        assert a["buckets"] == h["buckets"]


def test_every_length_scores_the_same_masked_tokens(trained_workdir, cells):
    run = restore.open_run(trained_workdir)
    settings = batches.Settings(masked_tokens=MASKED)
    stream = batches.stream(run, settings)
    masked = np.flatnonzero(stream.weights)
    assert masked.size >= MASKED
    for length in [*LENGTHS, 3, 7, 5 * TRAINED + 3]:
        rows = batches.rows(run, length, settings)
        w = rows.arrays["mlm_weights"] > 0
        scored = rows.stream_index[w]
        np.testing.assert_array_equal(np.sort(scored), masked)  # each one exactly once
        # ... with the same input at the masked place and the same target
        np.testing.assert_array_equal(rows.arrays["input_ids"][w], stream.inputs[scored])
        np.testing.assert_array_equal(rows.arrays["mlm_targets"][w], stream.ids[scored])
        assert rows.arrays["input_ids"].shape[1] == length
    # every cell (all methods, all lengths) scored the same number of tokens
    assert {c["overall"]["count"] for c in cells if c["status"] == "ok"} == {masked.size}
    # the truncate windows see the same inputs, only their positions and segments change
    base = batches.rows(run, 2 * TRAINED, settings).arrays
    plain = batches.for_method(base, None, causal=False)
    windows = batches.for_method(base, TRAINED, causal=False)
    for key in ("input_ids", "mlm_targets", "mlm_weights", "token_type_ids", "mlm_positions"):
        np.testing.assert_array_equal(plain[key], windows[key])


def test_truncate_windows_restart_positions_and_cut_attention():
    base = {"input_ids": np.ones((2, 10), np.int32), "token_type_ids": np.zeros((2, 10), np.int32),
            "positions": np.tile(np.arange(10, dtype=np.int32), (2, 1)),
            "segment_ids": np.ones((2, 10), np.int32), "mlm_targets": np.zeros((2, 10), np.int32),
            "mlm_weights": np.zeros((2, 10), np.float32)}
    out = batches.for_method(base, 4, causal=False)
    np.testing.assert_array_equal(out["positions"][0], [0, 1, 2, 3, 0, 1, 2, 3, 0, 1])
    np.testing.assert_array_equal(out["segment_ids"][1], [1, 1, 1, 1, 2, 2, 2, 2, 3, 3])


def test_rerun_skips_finished_cells_and_redoes_only_missing_ones(sweep, trained_workdir, monkeypatch,
                                                                tmp_path):
    out, results = sweep
    calls = []
    real = sweep_lib.evaluate_cell

    def counting(run, variant, length, settings, options):
        calls.append((variant.label, length))
        return real(run, variant, length, settings, options)

    monkeypatch.setattr(sweep_lib, "evaluate_cell", counting)
    again = driver.run(sweep_request(out, trained_workdir))
    assert calls == []
    assert again["cells"] == results["cells"]
    # drop one finished cell from results.json: the rerun computes that one only, same numbers
    path = os.path.join(out, "results.json")
    saved = json.load(open(path))
    key = next(k for k, c in saved["cells"].items()
               if c["method"] == "as_is" and c["length"] == TRAINED // 2)
    dropped = saved["cells"].pop(key)
    report.atomic_write(path, json.dumps(saved))
    third = driver.run(sweep_request(out, trained_workdir))
    assert calls == [("as_is", TRAINED // 2)]
    assert third["cells"][key]["overall"] == dropped["overall"]
    # a results.json of the older format (workdirs as absolute paths, in keys and records)
    # still resumes: nothing is recomputed and it is rewritten with relative keys
    relative = dropped["workdir"]
    absolute = os.path.abspath(os.path.join(out, relative))
    old = json.loads(json.dumps(third).replace(f'"{relative}', f'"{absolute}'))
    assert all(k.startswith(absolute) for k in (*old["runs"], *old["cells"]))
    report.atomic_write(path, json.dumps(old))
    fourth = driver.run(sweep_request(out, trained_workdir))
    assert calls == [("as_is", TRAINED // 2)]
    assert fourth["cells"] == third["cells"] and fourth["runs"].keys() == third["runs"].keys()
    # a results.json from before per-row sums (schema 1) is refused, never mixed in
    stale = tmp_path / "stale"
    stale.mkdir()
    report.atomic_write(str(stale / "results.json"), json.dumps(
        {"schema": "posjax.extrapolation/1", "cells": {}, "runs": {}}))
    with pytest.raises(ConfigError, match="schema 1"):
        driver.run(sweep_request(stale, trained_workdir))
    assert calls == [("as_is", TRAINED // 2)]


def test_plots_are_one_axes_or_small_multiples(sweep, tmp_path):
    from posjax.evaluation.report import plots

    _, results = sweep
    one, many = tmp_path / "one", tmp_path / "many"
    one.mkdir()
    many.mkdir()
    names = {os.path.basename(p) for p in plots.write_plots(str(one), results)}
    # two methods, a length beyond the training length, a baseline: ranked and differenced
    assert names == {"accuracy_vs_length.png", "ranking.png", "differences.png"}
    assert len(plots._series(results, set())) == 2  # as_is, hierarchical; not the shuffled
    # the same cells under 5 run names: 10 lines > MAX_LINES, a grid of small multiples
    # (seed_cells=None: figures draw seed groups when results hold them, these runs are not)
    crowded = dict(results, seed_cells=None, cells={
        f"{k}#{i}": dict(c, run=f"{c['run']}_{i}") for i in range(5)
        for k, c in results["cells"].items()})
    assert len(plots._series(crowded, set())) == 10 > plots.MAX_LINES
    paths = plots.write_plots(str(many), crowded)
    assert all(os.path.getsize(p) > 0 for p in paths)
    assert not [f for f in os.listdir(many) if ".tmp" in f]  # written atomically


def test_cells_from_other_weights_are_refused_not_mixed(sweep, trained_workdir, monkeypatch,
                                                       tmp_path):
    out, results = sweep
    (key,) = results["runs"]
    digest = results["runs"][key]["weights"]
    assert len(digest) == 64  # sha256 of the checkpoint's params
    calls = []
    monkeypatch.setattr(sweep_lib, "evaluate_cell", lambda *a: calls.append(a))
    # the same results in another folder: its keys name the workdir relative to that folder
    relative = results["runs"][key]["workdir"]
    moved = os.path.relpath(trained_workdir, tmp_path)
    saved = json.loads(open(os.path.join(out, "results.json")).read().replace(
        f'"{relative}', f'"{moved}'))
    key = key.replace(relative, moved, 1)
    path = str(tmp_path / "results.json")
    # the same workdir and step, other weights (retrained elsewhere): one line, nothing scored
    saved["runs"][key]["weights"] = "0" * 64
    report.atomic_write(path, json.dumps(saved))
    with pytest.raises(ConfigError, match="sha256 000000000000"):
        driver.run(sweep_request(tmp_path, trained_workdir))
    assert calls == []
    # a results.json from before digests takes the checkpoint's and resumes: nothing rescored
    del saved["runs"][key]["weights"]
    report.atomic_write(path, json.dumps(saved))
    again = driver.run(sweep_request(tmp_path, trained_workdir))
    assert calls == [] and again["runs"][key]["weights"] == digest
