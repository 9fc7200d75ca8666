"""One corpus per comparison: eval.py refuses runs trained on different corpora or tokenizers
in one results folder (one line, exit 2, before anything is built), unless
--allow_mixed_corpora; then the tables' title says so."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from posjax.errors import ConfigError
from posjax.evaluation.run import corpora_check
from posjax.evaluation.report import report
from tests.evaluation.conftest import sweep_request


def _other_corpus(workdir: str, tmp_path, **data) -> str:
    """A copy of the tiny trained workdir whose config says it read another corpus."""
    copy = str(tmp_path / "other")
    shutil.copytree(workdir, copy)
    path = os.path.join(copy, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["data"].update(data)
    with open(path, "w") as f:
        json.dump(config, f)
    return copy


def test_corpus_of_names_the_four_fields():
    a = {"data": {"corpus": "kjv", "tokenizer": "wordpiece"}}
    assert corpora_check.corpus_of(a) == ("kjv", "", "", "wordpiece")
    assert corpora_check.check_one_corpus({"x": a, "y": dict(a)}, allow=False) is None
    b = {"data": {"corpus": "text_dir", "path": "books/", "tokenizer": "wordpiece"}}
    with pytest.raises(ConfigError, match="--allow_mixed_corpora"):
        corpora_check.check_one_corpus({"x": a, "y": b}, allow=False)
    lines = corpora_check.check_one_corpus({"x": a, "y": b}, allow=True)
    assert lines == ["x: kjv, wordpiece tokenizer", "y: text_dir books/, wordpiece tokenizer"]


@pytest.mark.slow
def test_driver_refuses_mixed_corpora_before_writing(trained_workdir, tmp_path):
    from posjax.evaluation import driver

    other = _other_corpus(trained_workdir, tmp_path, tokenizer="wordpiece")
    out = tmp_path / "out"
    request = sweep_request(out, trained_workdir)
    request.workdirs.append(other)
    with pytest.raises(ConfigError) as e:
        driver.run(request)
    assert "tokenizer" in str(e.value) and "\n" not in str(e.value)
    assert not out.exists()


def test_mixed_corpora_title(tmp_path):
    results = {"settings": {"mixed_corpora": ["x: kjv, wordpiece tokenizer",
                                              "y: peoples_daily, chinese_chars tokenizer"]},
               "runs": {}, "cells": {}}
    md = report.to_markdown(results)
    assert md.startswith("# Length extrapolation (mixed corpora: x: kjv")


@pytest.mark.slow
def test_eval_py_one_line_exit_2(trained_workdir, tmp_path):
    from tests.test_eval_smoke import eval_py

    other = _other_corpus(trained_workdir, tmp_path, corpus="kjv")
    done = eval_py(f"--workdir={trained_workdir}", f"--workdir={other}",
                   f"--out={tmp_path / 'out'}", "--lengths=16", "--progress_bar=false")
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "--allow_mixed_corpora" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_runs_differing_only_in_seed_share_their_table_cells(trained_workdir, tmp_path):
    """End to end: a copy of the tiny run that says it was trained with seed 1 (the same
    weights: only the grouping is under test) forms one 2-seed group with the original."""
    from posjax.evaluation import driver

    other = _other_corpus(trained_workdir, tmp_path)
    path = os.path.join(other, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["seed"] = 1
    with open(path, "w") as f:
        json.dump(config, f)
    request = sweep_request(tmp_path / "out", trained_workdir)
    request.workdirs.append(other)
    request.lengths, request.methods = [16], ["as_is"]
    results = driver.run(request)
    (group,) = results["groups"].values()
    assert group["seeds"] == [0, 1] and len(group["runs"]) == 2
    cell = next(c for c in results["seed_cells"].values() if not c["params"])
    assert cell["n_seeds"] == 2 and cell["seeds"] == [0, 1]
    assert cell["interval"].startswith(("2-level bootstrap", "cluster jackknife"))
    md = (tmp_path / "out" / "results.md").read_text()
    assert "2 seeds (0, 1)" in md
    bad = sweep_request(tmp_path / "out2", trained_workdir)
    bad.groups = {"g": [trained_workdir, "nowhere"]}
    with pytest.raises(ConfigError, match="group"):
        driver.run(bad)
