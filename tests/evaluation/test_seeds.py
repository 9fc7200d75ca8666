"""Seeds as an axis of the evaluator (posjax.evaluation.derive.seeds) and the summary command
(posjax.evaluation.summary), on synthetic cells: no model, no JAX."""

from __future__ import annotations

import json

import numpy as np
import pytest

from posjax.evaluation import derive, summary
from posjax.evaluation.report import report
from posjax.evaluation.results import results_file
from posjax.evaluation.derive import seeds
from posjax.evaluation.stats import intervals
from posjax.evaluation.report.figures import lines

CLUSTERS = 24


def _rows(level: float, seed: int, scheme_shift: float = 0.0) -> dict:
    rng = np.random.default_rng(1000 + seed)  # the same seed: the same per-token luck
    count = np.full(CLUSTERS * 2, 10)
    p = np.clip(level + scheme_shift + 0.02 * seed + rng.uniform(-0.1, 0.1, count.size), 0, 1)
    return {"correct": np.floor(count * p).astype(int).tolist(), "count": count.tolist(),
            "loss": (count * (2 - p)).tolist(), "cluster": np.repeat(np.arange(CLUSTERS), 2).tolist()}


def _cell(run: str, label: str, length: int, rows: dict, **params) -> dict:
    """A whole cell record (posjax.evaluation.results.record.OkCell), its overall from its rows."""
    seed = int(run.rpartition("seed")[2] or 0)
    summary = intervals.summarize(rows, seed_of_run=seed)
    overall = dict({k: v for k, v in summary.items() if k not in ("n_seeds", "seeds")},
                   correct=sum(rows["correct"]), loss_sum=float(sum(rows["loss"])))
    c = {"run": run, "workdir": f"w/{run}", "scheme": "rope", "trained_length": 16, "step": 10,
         "causal": False, "method": label, "label": label, "params": params, "length": length,
         "seed": seed, "status": "ok", "rows": rows, "crossing_rows": 0, "buckets": [],
         "overall": overall, "n_seeds": 1, "seeds": [seed], "interval": summary["interval"],
         "wall_s": 0.0, "first_batch_s": 0.0, "rows_per_batch": 1}
    if params.get("shuffle_positions"):
        c["label"] = f"{label} shuffled"
    return c


def _results(schemes=("rope", "alibi"), seed_list=(0, 1, 2), groups=None, baseline="as_is"):
    runs, cells = {}, {}
    for k, scheme in enumerate(schemes):
        for s in seed_list:
            key = f"w/{scheme}_seed{s}@10"
            runs[key] = {"name": f"{scheme}_seed{s}", "workdir": f"w/{scheme}_seed{s}",
                         "step": 10, "scheme": scheme, "trained_length": 16, "causal": False,
                         "config": {"seed": s, "position": {"name": scheme},
                                    "data": {"corpus": "peoples_daily"}}}
            for length in (16, 32):
                for label, shift in (("as_is", 0.0), ("ntk", 0.05)):
                    cells[f"{key}|{label}|L={length}|h"] = _cell(
                        f"{scheme}_seed{s}", label, length, _rows(0.3 + shift - 0.1 * k, s))
            cells[f"{key}|as_is-s|L=16|h"] = _cell(f"{scheme}_seed{s}", "as_is", 16,
                                                   _rows(0.2, s), shuffle_positions=True)
    versions = {k: "test" for k in ("python", "jax", "flax", "numpy", "backend")}
    return {"schema": results_file.SCHEMA, "created": "2026-01-01T00:00:00Z",
            "versions": dict(versions, posjax_commit=None),
            "settings": {"baseline": baseline, "seed": 0, "groups": groups or {}},
            "runs": runs, "cells": cells}


def test_runs_that_differ_only_in_seed_are_one_group():
    results = derive.derive(_results(), "as_is")
    groups = results["groups"]
    assert set(groups) == {"rope", "alibi"}
    assert groups["rope"]["seeds"] == [0, 1, 2]
    assert groups["rope"]["runs"] == [f"w/rope_seed{s}@10" for s in (0, 1, 2)]
    c = results["seed_cells"]["rope|ntk|L=32|h"]
    assert c["n_seeds"] == 3 and c["seeds"] == [0, 1, 2] and c["run"] == "rope"
    per_seed = [sum(results["cells"][f"w/rope_seed{s}@10|ntk|L=32|h"]["rows"]["correct"]) /
                (CLUSTERS * 20) for s in (0, 1, 2)]
    assert c["overall"]["accuracy"] == pytest.approx(np.mean(per_seed))
    assert c["overall"]["per_seed"]["accuracy"] == pytest.approx(per_seed)
    assert c["interval"] in ("2-level bootstrap", "t over seed means")
    # every run's own cell is 1 seed
    one = results["cells"]["w/rope_seed1@10|ntk|L=32|h"]
    assert one["n_seeds"] == 1 and one["seeds"] == [1]


def test_differences_are_paired_by_seed_and_stored_with_their_seeds():
    results = derive.derive(_results(), "as_is")
    diffs = results["differences"]
    kinds = {d["kind"] for d in diffs.values()}
    assert kinds == {"baseline", "runs"}
    d = diffs["rope|ntk|L=32|h - rope|as_is|L=32|h"]
    assert d["kind"] == "baseline" and d["baseline"] == "as_is" and d["seeds"] == [0, 1, 2]
    assert d["per_seed"]["accuracy"] == pytest.approx([0.05] * 3, abs=0.02)
    assert 0 < d["accuracy_lo"] < d["accuracy_hi"]
    across = diffs["rope|as_is|L=16|h - alibi|as_is|L=16|h"]
    assert across["kind"] == "runs" and across["a_run"] == "rope" and across["n_seeds"] == 3
    assert across["accuracy"] == pytest.approx(0.1, abs=0.02)
    r = results["reliance"]["rope"]
    assert r["n_seeds"] == 3 and r["accuracy"] > 0 and r["length"] == 16


def test_a_lone_run_is_a_1_seed_group_keyed_by_its_run_and_says_so():
    results = derive.derive(_results(schemes=("rope",), seed_list=(0,)), "as_is")
    assert list(results["groups"]) == ["w/rope_seed0@10"]
    key = "w/rope_seed0@10|ntk|L=16|h"
    assert key in results["seed_cells"] and results["seed_cells"][key]["n_seeds"] == 1
    md = report.to_markdown(results)
    assert "step 10, 1 seed)" in md and "95% intervals: cluster bootstrap" in md


def test_same_seed_twice_is_not_a_seed_group_and_explicit_groups_win():
    results = _results(seed_list=(0,))
    results["runs"]["w/rope_again@10"] = dict(results["runs"]["w/rope_seed0@10"],
                                             name="rope_again")
    groups = seeds.groups(results)
    assert all(len(g["runs"]) == 1 for g in groups.values())
    explicit = _results(groups={"mine": ["w/rope_seed0@10", "w/alibi_seed1@10"]})
    groups = seeds.groups(explicit)
    assert groups["mine"]["runs"] == ["w/rope_seed0@10", "w/alibi_seed1@10"]
    assert groups["mine"]["seeds"] == [0, 1]


def test_summary_prints_from_results_json_alone(tmp_path, capsys):
    results = derive.derive(_results(), "as_is")
    (tmp_path / "results.json").write_text(results_file.dumps(results))
    summary.main(["summary", str(tmp_path)])
    out = capsys.readouterr().out
    assert "| rope | ntk | 32 |" in out and "3 seeds (0, 1, 2)" in out
    assert "| baseline | rope ntk | rope as_is | 32 | +0.05" in out
    # an older schema-2 file (no seed sections) is derived on the fly
    old = {k: v for k, v in results.items() if k not in ("groups", "seed_cells",
                                                          "differences", "reliance")}
    (tmp_path / "results.json").write_text(json.dumps(old))
    summary.main(["summary", str(tmp_path)])
    assert capsys.readouterr().out == out


def test_summary_rewrite_renders_an_older_file_under_todays_rule(tmp_path, capsys):
    results = derive.derive(_results(), "as_is")
    old = {k: v for k, v in results.items() if k not in ("groups", "seed_cells",
                                                          "differences", "reliance")}
    (tmp_path / "results.json").write_text(json.dumps(old))
    (tmp_path / "results.md").write_text("stale table\n")
    summary.main(["summary", str(tmp_path), "--rewrite"])
    out = capsys.readouterr().out
    assert "rewrote in" in out and "results.md" in out
    table = (tmp_path / "results.md").read_text()
    assert "stale" not in table and "3 seeds" in table
    rewritten = json.loads((tmp_path / "results.json").read_text())
    assert "seed_cells" in rewritten  # the derived sections are stored; the rows are kept
    assert {k: c["rows"] for k, c in rewritten["cells"].items()} == \
        {k: c["rows"] for k, c in old["cells"].items()}
    summary.main(["summary", str(tmp_path)])  # the printed summary is unchanged by it
    assert capsys.readouterr().out == out.split("\nrewrote in")[0]


def test_summary_gives_older_task_cells_wilson_intervals_per_depth(tmp_path):
    results = derive.derive(_results(), "as_is")
    rows = {"correct": [0, 0, 4, 4], "count": [4, 4, 4, 4], "depth": [0.0, 0.0, 1.0, 1.0]}
    old_depths = [{"depth": 0.0, "exact": 0.0, "exact_lo": 0.0, "exact_hi": 0.0},
                  {"depth": 1.0, "exact": 1.0, "exact_lo": 1.0, "exact_hi": 1.0}]
    head = {k: v for k, v in next(iter(results["cells"].values())).items() if k in (
        "run", "workdir", "step", "scheme", "trained_length", "causal", "method", "label",
        "params", "length", "seed")}
    results["tasks"] = {"w/rope_seed0@10|t": dict(  # no seeds, no named intervals
        head, task="passkey", status="ok", rows=rows, depths=old_depths, wall_s=0.0,
        rows_per_batch=1, overall={"exact": 0.5, "exact_lo": 0.5, "exact_hi": 0.5})}
    (tmp_path / "results.json").write_text(json.dumps(results))
    cell = summary.load(str(tmp_path))["tasks"]["w/rope_seed0@10|t"]
    assert (cell["n_seeds"], cell["seeds"], cell["interval"]) == (1, [0], "Wilson")
    assert cell["overall"]["exact_hi"] > cell["overall"]["exact"] > cell["overall"]["exact_lo"]
    for d in cell["depths"]:  # 0/2 and 2/2: Wilson, never zero-width
        assert d["interval"] and d["exact_hi"] - d["exact_lo"] > 0.5


@pytest.mark.parametrize("content", [None, "not json", '{"schema": "posjax.extrapolation/1"}'])
def test_summary_refuses_a_bad_folder_with_one_line(tmp_path, capsys, content):
    if content is not None:
        (tmp_path / "results.json").write_text(content)
    with pytest.raises(SystemExit) as e:
        summary.main(["summary", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "error:" in err
    if content and "/1" in content:  # what to do about a schema-1 file
        assert "rerun eval.py" in err


def test_each_seed_of_a_group_keeps_its_own_quotable_differences():
    results = derive.derive(_results(), "as_is")
    own = results["differences"]["w/rope_seed1@10|ntk|L=32|h - w/rope_seed1@10|as_is|L=32|h"]
    assert own["kind"] == "baseline" and own["n_seeds"] == 1 and own["seeds"] == [1]
    assert own["a_run"] == "rope_seed1" and own["interval"] == "cluster bootstrap"
    assert results["reliance"]["w/rope_seed1@10"]["seeds"] == [1]
    # runs pairs stay between groups: no seed of a group is compared with another group's
    assert not any(d["kind"] == "runs" and d["n_seeds"] == 1
                   for d in results["differences"].values())
    # and the tables show the groups only
    md = report.to_markdown(results)
    assert "rope_seed1" not in md and "## rope (" in md


def test_interval_text_is_one_format_for_every_table():
    d = {"accuracy": 0.1234567, "accuracy_lo": 0.1, "accuracy_hi": 0.15}
    assert results_file.interval_text(d, "accuracy") == "0.1235 [0.1000, 0.1500]"
    assert results_file.interval_text(d, "accuracy", signed=True, digits=3) == "+0.123 [+0.100, +0.150]"
    no_interval = {"accuracy": 0.1, "accuracy_lo": None, "accuracy_hi": None}
    assert results_file.interval_text(no_interval, "accuracy", missing="n/a") == "n/a"
    assert results_file.interval_text(None, "accuracy") == ""


def test_grouped_tasks_puts_a_seed_group_in_place_of_its_runs():
    tasks = {"w/a@1|as_is|L=8|passkey|h": {"run": "a"}, "w/b0@1|as_is|L=8|passkey|h": {"run": "b0"},
             "w/b1@1|as_is|L=8|passkey|h": {"run": "b1"}}
    group = {"b|as_is|L=8|passkey|h": {"run": "b"}}
    results = {"tasks": tasks, "task_seed_cells": group,
               "groups": {"w/a@1": {"runs": ["w/a@1"]}, "b": {"runs": ["w/b0@1", "w/b1@1"]}}}
    assert [c["run"] for c in seeds.grouped_tasks(results).values()] == ["a", "b"]
    assert [c["run"] for c in seeds.grouped_tasks({"tasks": tasks}).values()] == ["a", "b0", "b1"]


def test_a_method_not_applicable_to_every_seed_counts_them_all():
    """A cell that no seed can score (a table too short for the length) is n/a for all three
    seeds, and tables and plots say '3 seeds', not '1 seed'."""
    results = _results()
    for key, c in list(results["cells"].items()):
        if "|ntk|L=32|" in key:
            results["cells"][key] = {k: v for k, v in c.items() if k not in ("rows", "overall")}
            results["cells"][key].update(status="not_applicable", reason="too long")
    c = derive.derive(results, "as_is")["seed_cells"]["rope|ntk|L=32|h"]
    assert c["status"] == "not_applicable" and c["n_seeds"] == 3 and c["seeds"] == [0, 1, 2]
    assert lines.seed_text([c]) == "3 seeds"
