"""An experiment whose results.json already holds every cell of a run needs neither that
run's workdir nor a retraining: an earlier session's committed cells are the run, and a
retrained run on another CPU would be other weights."""

from __future__ import annotations

import json
import os
import shutil

import ml_collections
import pytest

from configs.experiments.common import experiment
from posjax.evaluation import driver
from posjax.evaluation.report import report
from posjax.evaluation.results import results_file
from posjax.evaluation.run import sweep as sweep_lib
from tests.evaluation.conftest import MASKED, TRAINED
from tests.evaluation.fixtures import tiny_config

pytestmark = pytest.mark.slow  # trains two tiny runs


def _request(out, exp):
    return driver.Request(out=str(out), lengths=[TRAINED, 2 * TRAINED], methods=["as_is"],
                          alphas=(0.4,), masked_tokens=MASKED, batch_tokens=256,
                          experiment=exp, progress=False)


@pytest.fixture(scope="module")
def experiment_run(tmp_path_factory):
    """One tiny experiment (runs 'learned' and 'none') trained and scored, in the folder it ran
    from (its workdir_root is relative to the cwd): (folder, experiment, out, results, seen),
    `seen` being (run, runs in results.json) as each run's training began. Shared: the tests
    below read it; only the first one changes the folder, after the others' reads."""
    root = tmp_path_factory.mktemp("experiment")
    exp = experiment("finished", {"learned": tiny_config("learned"),
                                  "none": tiny_config("none")},
                     lengths=[TRAINED], methods=None, alphas=[0.4], seeds=(0,))
    out = root / "out"
    seen = []
    real = driver.training.train_and_evaluate

    def train(cfg, workdir, **kw):
        path = os.path.join(out, results_file.RESULTS)
        seen.append((os.path.basename(workdir), sorted(
            {c["run"] for c in json.load(open(path))["cells"].values()}
            if os.path.exists(path) else [])))
        return real(cfg, workdir, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setattr(driver.training, "train_and_evaluate", train)
        results = driver.run(_request(out, exp))
    return root, exp, out, results, seen


def test_an_experiment_is_trained_and_scored_one_run_at_a_time(experiment_run):
    """Each run's cells are in results.json before the next run trains: a study stopped
    between runs keeps every finished one."""
    _, _, _, results, seen = experiment_run
    assert seen == [("learned", []), ("none", ["learned"])]
    assert {c["run"] for c in results["cells"].values()} == {"learned", "none"}


def test_runs_finished_in_results_json_are_kept_without_their_workdirs(experiment_run,
                                                                       monkeypatch, capsys):
    root, exp, out, first, _ = experiment_run
    monkeypatch.chdir(root)  # the experiment's workdir_root is relative to the cwd
    assert len(first["runs"]) == 2
    shutil.rmtree(os.path.join(exp.workdir_root, "none"))  # gone with the machine

    trained, scored = [], []

    def train(cfg, workdir, **kw):
        trained.append(workdir)
        raise RuntimeError("retrained")

    monkeypatch.setattr(driver.training, "train_and_evaluate", train)
    real = sweep_lib.evaluate_cell
    monkeypatch.setattr(sweep_lib, "evaluate_cell",
                        lambda run, *a: scored.append(run.name) or real(run, *a))
    again = driver.run(_request(out, exp))
    assert trained == [] and scored == []
    assert again["cells"] == first["cells"] and again["runs"] == first["runs"]
    assert "kept as they are (not retrained): none" in capsys.readouterr().out

    # one of its cells missing: the run is not finished, so it is trained again
    path = os.path.join(out, results_file.RESULTS)
    saved = json.load(open(path))
    (key,) = [k for k, c in saved["cells"].items()
              if c["run"] == "none" and c["length"] == 2 * TRAINED]
    del saved["cells"][key]
    report.atomic_write(path, json.dumps(saved))
    with pytest.raises(RuntimeError, match="retrained"):
        driver.run(_request(out, exp))
    assert trained == [str(root / exp.workdir_root / "none")]


def test_a_request_for_more_cells_than_results_json_holds_opens_the_run(tmp_path):
    exp = ml_collections.ConfigDict({"runs": {}, "workdir_root": str(tmp_path)})
    settings = driver.batches_lib.Settings(masked_tokens=MASKED, seed=0)
    # nothing to keep without a results.json, for tasks, curves or unstated lengths
    assert driver.finished_without_workdir(_request(tmp_path, exp), settings) == []
    assert driver.finished_without_workdir(
        driver.Request(out=str(tmp_path), experiment=exp), settings) == []
