"""The sweep on a tiny trained checkpoint: output schema, identical rows/masks across methods,
bucket sums, hierarchical == learned inside the table, not_applicable cells, resumability."""

from __future__ import annotations

import csv
import json
import os

import numpy as np

from posjax.evaluation import batches, driver, report, restore, sweep as sweep_lib
from tests.evaluation.conftest import LENGTHS, TRAINED, cell, sweep_request

CELL_KEYS = {"run", "workdir", "step", "scheme", "trained_length", "causal", "method", "label",
             "params", "length", "num_docs", "seed", "status"}
NUMBERS = {"count", "correct", "loss_sum", "loss", "accuracy"}


def test_output_files_and_schema(sweep, trained_workdir):
    out, results = sweep
    for name in ("results.json", "results.csv", "results.md", "accuracy_vs_length.png",
                 "accuracy_by_position.png"):
        assert os.path.getsize(os.path.join(out, name)) > 0, name
    with open(os.path.join(out, "results.json")) as f:
        saved = json.load(f)
    assert saved["schema"] == report.SCHEMA
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
    assert len(saved["cells"]) == len(LENGTHS) * 2  # as_is + hierarchical(alpha=0.4)
    for c in saved["cells"].values():
        assert CELL_KEYS <= set(c)
        if c["status"] == "ok":
            assert NUMBERS <= set(c["overall"])
            assert all(NUMBERS | {"bucket", "start", "end"} <= set(b) for b in c["buckets"])
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


def test_same_rows_and_masks_for_every_method(trained_workdir, tmp_path, cells):
    run = restore.open_run(trained_workdir)
    settings = batches.Settings(num_docs=2, cache_dir=str(tmp_path))
    base = batches.rows(run, 2 * TRAINED, settings)
    batches._CACHE.clear()
    again = batches.rows(run, 2 * TRAINED, settings)
    plain = batches.for_method(base, None, causal=False)
    windows = batches.for_method(again, TRAINED, causal=False)
    for key in ("input_ids", "mlm_targets", "mlm_weights", "token_type_ids"):
        np.testing.assert_array_equal(plain[key], windows[key])
    # the methods evaluated at one length scored the same number of masked tokens
    for length in LENGTHS:
        counts = {c["overall"]["count"] for c in cells if c["length"] == length and c["status"] == "ok"}
        assert len(counts) == 1


def test_truncate_windows_restart_positions_and_cut_attention():
    base = {"input_ids": np.ones((2, 10), np.int32), "token_type_ids": np.zeros((2, 10), np.int32),
            "positions": np.tile(np.arange(10, dtype=np.int32), (2, 1)),
            "segment_ids": np.ones((2, 10), np.int32), "mlm_targets": np.zeros((2, 10), np.int32),
            "mlm_weights": np.zeros((2, 10), np.float32)}
    out = batches.for_method(base, 4, causal=False)
    np.testing.assert_array_equal(out["positions"][0], [0, 1, 2, 3, 0, 1, 2, 3, 0, 1])
    np.testing.assert_array_equal(out["segment_ids"][1], [1, 1, 1, 1, 2, 2, 2, 2, 3, 3])


def test_rerun_skips_finished_cells_and_redoes_only_missing_ones(sweep, trained_workdir, monkeypatch):
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


def test_comparison_plot_only_with_several_runs(sweep, tmp_path):
    _, results = sweep
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    names = {os.path.basename(p) for p in report.write_plots(str(one), results)}
    assert names == {"accuracy_vs_length.png", "accuracy_by_position.png"}
    # The same cells again under a second run name: a third plot with both runs on one axes.
    doubled = dict(results, cells=dict(results["cells"]))
    for key, c in results["cells"].items():
        doubled["cells"][key + "#copy"] = dict(c, run=c["run"] + "_copy")
    paths = report.write_plots(str(two), doubled)
    assert {os.path.basename(p) for p in paths} == names | {"comparison.png"}
    assert all(os.path.getsize(p) > 0 for p in paths)
    assert not [f for f in os.listdir(two) if ".tmp" in f]  # written atomically
