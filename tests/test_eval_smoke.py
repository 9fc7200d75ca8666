"""eval.py end to end in a subprocess: a real run on the tiny trained checkpoint (files, skip on
rerun) and bad inputs (one line on stderr, exit code 2, nothing compiled)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from posjax.errors import ConfigError
from posjax.evaluation import driver
from tests.evaluation.fixtures import REPO, TRAINED, train_once

# Slow tier: whole train.py / eval.py runs in subprocesses.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return train_once(str(tmp_path_factory.getbasetemp()))


def eval_py(*args, timeout=300):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, os.path.join(REPO, "eval.py"), *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_eval_py_writes_results_and_skips_them_on_rerun(workdir, tmp_path):
    args = (f"--workdir={workdir}", f"--out={tmp_path}", f"--lengths={TRAINED}",
            "--methods=truncate,as_is", "--baseline=as_is", "--masked_tokens=60",
            "--progress_bar=false")
    first = eval_py(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    # truncate, as_is, as_is shuffled
    assert "eval: 3 cells evaluated, 0 already done, 0 not applicable" in first.stdout
    # the plan: one line before any cell
    plan = [ln for ln in first.stdout.splitlines() if ln.startswith("eval: plan:")]
    (line,) = plan  # a fresh folder: the estimate comes from a timed probe of the first cell
    assert re.fullmatch(r"eval: plan: 3 cells: 3 to score, 0 done, 0 not applicable; about "
                        rf"\S+ \(from a timed probe at L={TRAINED}\)", line), line
    assert "3/3 scored, done)" in first.stdout
    with open(tmp_path / "results.json") as f:
        saved = json.load(f)
    cells = saved["cells"].values()
    assert {c["label"] for c in cells} == {"truncate", "as_is", "as_is shuffled"}
    assert all(c["status"] == "ok" and c["length"] == TRAINED for c in cells)
    assert len(saved["reliance"]) == 1 and len(saved["differences"]) == 1
    for name in ("results.csv", "results.md", "accuracy_vs_length.png"):
        assert (tmp_path / name).stat().st_size > 0
    # no --progress_bar: stderr is a pipe here, so no bar (no '\r' redraws in a log file)
    second = eval_py(*[a for a in args if a != "--progress_bar=false"])
    assert second.returncode == 0, second.stderr[-2000:]
    assert (f"eval: plan: 3 cells: 0 to score, 3 done (3 in {tmp_path}), 0 not applicable; "
            "nothing to score") in second.stdout
    assert "eval: 0 cells evaluated, 3 already done, 0 not applicable" in second.stdout
    assert "\r" not in second.stdout + second.stderr


# eval.py's own plumbing (one line on stderr, exit 2, nothing written) for an error of each
# stage: flag parsing before JAX starts, the request's checks, and the checks that open a run
@pytest.mark.parametrize("args,words", [
    (("--lengths=0",), ("lengths=0", "int")),
    (("--lengths=16,900000",), ("lengths=900000", "held-out stream", "at most")),
    (("--recovery_steps=0,x",), ("recovery_steps", "ints")),
    (("--recovery_steps=0,2", "--continue_length=32", "--continue_seeds=0,x"),
     ("continue_seeds", "ints")),
])
def test_bad_input_is_one_line_and_exit_2(workdir, tmp_path, args, words):
    args = (f"--workdir={workdir}", *args)
    result = eval_py(*args, f"--out={tmp_path / 'out'}")
    assert result.returncode == 2, (result.stdout[-1000:], result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("eval.py: error:")
    for w in words:
        assert w in lines[0], lines[0]
    assert not (tmp_path / "out").exists()  # nothing written


# the other checks, in process: the ConfigError eval.py prints as its one line
@pytest.mark.parametrize("fields,words", [
    ({"workdirs": ["/nonexistent/run"]}, ("workdir", "/nonexistent/run")),
    ({"methods": ["yarn"]}, ("methods='yarn'", "learned")),
    ({"methods": ["bogus"]}, ("methods='bogus'", "as_is")),
    ({"methods": ["as_is", "tile"], "baseline": "truncate"}, ("baseline='truncate'",
                                                              "as_is, tile")),
    ({"cluster_tokens": -4}, ("cluster_tokens=-4", ">= 0")),
])
def test_bad_request_is_one_config_error_before_anything_is_written(workdir, tmp_path, fields,
                                                                   words):
    request = driver.Request(out=str(tmp_path / "out"), **{"workdirs": [workdir], **fields})
    with pytest.raises(ConfigError) as e:
        driver.run(request)
    for w in words:
        assert w in str(e.value), str(e.value)
    assert not (tmp_path / "out").exists()


def test_results_from_before_per_row_sums_are_refused(workdir, tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(
        {"schema": "posjax.extrapolation/1", "runs": {}, "cells": {}}))
    result = eval_py(f"--workdir={workdir}", f"--out={tmp_path}", f"--lengths={TRAINED}")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "schema 1" in lines[0], result.stderr
