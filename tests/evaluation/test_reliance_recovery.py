"""Position reliance (shuffled vs intact position ids) and the resumable recovery curve."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from posjax.evaluation.run import batches, recovery, restore
from posjax.evaluation import derive, methods
from posjax.evaluation.report import recovery_seeds
from posjax.evaluation.run import sweep as sweep_lib
from tests.evaluation.conftest import MASKED, TRAINED

# Slow tier: trains the tiny evaluation model (session fixture) and sweeps it.
pytestmark = pytest.mark.slow

SETTINGS = batches.Settings(masked_tokens=MASKED, batch_tokens=256)


def _pair(workdir):
    run = restore.open_run(workdir)
    intact = sweep_lib.evaluate_cell(run, methods.Variant("as_is"), TRAINED, SETTINGS,
                                     methods.Options())
    shuffled = sweep_lib.evaluate_cell(run, methods.Variant("as_is", shuffle=True), TRAINED,
                                       SETTINGS, methods.Options())
    return intact, shuffled


def test_shuffled_positions_change_nothing_for_nope_and_something_for_a_learned_table(
        nope_workdir, cells):
    intact, shuffled = _pair(nope_workdir)
    # a NoPE encoder never reads its position ids: the same numbers, row by row
    assert intact["rows"]["correct"] == shuffled["rows"]["correct"]
    np.testing.assert_allclose(intact["rows"]["loss"], shuffled["rows"]["loss"], rtol=1e-5)
    run = {"name": "w", "workdir": "w", "step": 2, "scheme": "none", "trained_length": TRAINED,
           "causal": False, "config": {}}
    results = {"settings": {"seed": 0}, "runs": {"w@2": run},
               "cells": {"w@2|as_is{}|L=16|k": intact, "w@2|as_is-s|L=16|k": shuffled}}
    r = derive.derive(results)["reliance"]["w@2"]
    assert r["accuracy"] == r["accuracy_lo"] == r["accuracy_hi"] == 0.0
    assert abs(r["loss"]) < 1e-5
    learned = {c["label"]: c for c in cells if c["length"] == TRAINED}
    intact, shuffled = learned["as_is"], learned["as_is shuffled"]
    assert intact["rows"]["count"] == shuffled["rows"]["count"]  # the same scored tokens
    gap = np.abs(np.subtract(intact["rows"]["loss"], shuffled["rows"]["loss"]))
    assert gap.max() > 1e-3  # a learned table (even barely trained) moves the outputs


def test_recovery_curve_trains_once_evaluates_each_checkpoint_and_resumes(
        trained_workdir, tmp_path, monkeypatch):
    source = restore.open_run(trained_workdir)
    out, root = str(tmp_path / "out"), str(tmp_path / "continued")
    variant = methods.Variant("tile")
    results = recovery.run_recovery(source, [variant], 2 * TRAINED, [0, 2, 3], SETTINGS, out,
                                    root=root, meta={"seed": 0})
    (curve,) = results["recovery"].values()
    assert curve["label"] == "tile" and curve["length"] == 2 * TRAINED
    assert sorted(curve["cells"], key=int) == ["0", "2", "3"]
    cells = [results["cells"][curve["cells"][s]] for s in ("0", "2", "3")]
    assert all(c["status"] == "ok" for c in cells)
    assert cells[0]["method"] == "tile" and cells[1]["step"] == 2 and cells[2]["step"] == 3
    assert len({c["overall"]["count"] for c in cells}) == 1  # the same tokens at every step
    assert os.path.getsize(os.path.join(out, "recovery.png")) > 0
    with open(os.path.join(out, "results.md")) as f:
        md = f.read()
    assert "## Recovery" in md and "| 2 |" in md
    workdir = recovery.workdir_for(root, source, variant, 2 * TRAINED)
    # saved every gcd(2, 3) = 1 step to resume; step 1 is not on the curve: dropped
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["0", "2", "3"]
    # a rerun trains nothing and evaluates nothing
    calls = []
    monkeypatch.setattr(sweep_lib, "evaluate_cell", lambda *a: calls.append(a))
    monkeypatch.setattr(recovery.continued, "continue_training", lambda *a, **k: calls.append(a))
    again = recovery.run_recovery(source, [variant], 2 * TRAINED, [0, 2, 3], SETTINGS, out,
                                  root=root, meta={"seed": 0})
    assert calls == [] and again["recovery"] == results["recovery"]


@pytest.mark.slow
def test_recovery_over_seeds_trains_one_run_per_seed_and_writes_the_answer(
        trained_workdir, tmp_path, monkeypatch):
    source = restore.open_run(trained_workdir)
    out, root = str(tmp_path / "out"), str(tmp_path / "continued")
    length = 2 * TRAINED
    sweep_lib.run_sweep([source], [length], {source.key: [methods.Variant("truncate")]},
                        SETTINGS, methods.Options(), out, meta={}, reliance=False)
    # truncate: the control, the same continued training at the trained length
    variants = [methods.Variant("hierarchical", alpha=0.4), methods.Variant("tile"),
                methods.Variant("truncate")]
    # steps 0 and 2 only: the checkpoints between a curve's steps are the test above's
    results = recovery.run_recovery(source, variants, length, [0, 2], SETTINGS, out,
                                    root=root, seeds=[0, 1], batch_size=2)
    assert len(results["recovery"]) == 6
    for seed in (0, 1):
        workdir = recovery.workdir_for(root, source, variants[1], length, seed=seed)
        assert workdir.endswith(f"_constant_s{seed}")
        cfg = restore.open_run(workdir).config
        assert (cfg.seed, cfg.train.schedule, cfg.data.batch_size) == (seed, "constant", 2)
        curve = results["recovery"][recovery.curve_key(source, variants[1], length, seed=seed)]
        assert results["cells"][curve["cells"]["2"]]["continue_seed"] == seed
        assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["0", "2"]
    tile = [c for c in results["recovery"].values() if c["label"] == "tile"]
    assert tile[0]["cells"]["0"] == tile[1]["cells"]["0"]  # one zero-shot cell for both seeds
    assert tile[0]["cells"]["2"] != tile[1]["cells"]["2"]
    assert {c["tokens_per_step"] for c in tile} == {2 * length}
    control = [c for c in results["recovery"].values() if c["label"] == "truncate"]
    assert {c["tokens_per_step"] for c in control} == {2 * length}  # rows of T, twice as many
    run = restore.open_run(recovery.workdir_for(root, source, variants[2], length, seed=1))
    assert run.trained_length == TRAINED and run.config.data.batch_size == 4
    assert dict(run.config.position) == dict(source.config.position)
    cell = results["cells"][control[1]["cells"]["2"]]
    assert (cell["label"], cell["length"], cell["continue_seed"]) == ("truncate", length, 1)
    assert control[0]["cells"]["0"] == control[1]["cells"]["0"]  # the zero-shot truncate cell
    with open(os.path.join(out, recovery_seeds.ANSWER_JSON)) as f:
        (answer,) = json.load(f)
    assert answer["methods"]["tile"]["steps"]["2"]["seeds"] == 2
    assert "minus_hierarchical" in answer["methods"]["tile"]["steps"]["2"]
    assert answer["control"] == "truncate"
    tile_2 = answer["methods"]["tile"]["steps"]["2"]
    assert tile_2["minus_control"]["seeds"] == 2 and "minus_control" not in (
        answer["methods"]["truncate"]["steps"]["2"])
    assert tile_2["minus_control"]["accuracy"] == pytest.approx(
        tile_2["accuracy"] - answer["methods"]["truncate"]["steps"]["2"]["accuracy"])
    assert "within_control_estimate" in answer["methods"]["tile"]
    with open(os.path.join(out, recovery_seeds.ANSWER_MD)) as f:
        assert "### minus the control (truncate's curve) at the same step" in f.read()
    assert os.path.getsize(os.path.join(out, recovery_seeds.FIGURE)) > 0
    # results.json carried elsewhere without the continued workdirs: nothing is retrained
    shutil.rmtree(root)
    calls = []
    monkeypatch.setattr(recovery.continued, "continue_training", lambda *a, **k: calls.append(a))
    recovery.run_recovery(source, variants, length, [0, 2], SETTINGS, out, root=root,
                          seeds=[0, 1], batch_size=2)
    assert calls == []
