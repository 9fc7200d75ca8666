"""results.json through its typed record (posjax.evaluation.results.record, read and written only by
posjax.evaluation.results.results_file): every committed results folder reads back, declares every
field it holds, and writes back with its numbers unchanged; a broken record is one error
naming its field. No JAX; about two seconds for all the committed files."""

from __future__ import annotations

import copy
import glob
import json
import os

import pytest

from posjax.evaluation.results import record_check, results_file
from posjax.evaluation.results.record import Results

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(REPO, "results", "*",
                                                                  results_file.RESULTS)))


def _added(original, back, path="results") -> list[str]:
    """Paths `back` holds beyond `original`; AssertionError where a value of `original`
    changed (a number, a string, a list) or went missing."""
    if isinstance(original, dict):
        assert isinstance(back, dict), path
        missing = sorted(set(original) - set(back))
        assert not missing, f"{path}: {missing} lost"
        out = [f"{path}.{k}" for k in sorted(set(back) - set(original))]
        for k, v in original.items():
            out += _added(v, back[k], f"{path}.{k}")
        return out
    assert original == back or (original != original and back != back), path  # NaN == NaN
    return []


def test_there_are_committed_results():
    assert len(FOLDERS) >= 10, FOLDERS


@pytest.mark.parametrize("folder", FOLDERS, ids=os.path.basename)
def test_every_committed_results_file_round_trips_through_the_record(folder, tmp_path):
    text = open(os.path.join(folder, results_file.RESULTS), encoding="utf-8").read()
    loaded = results_file.load(folder)
    extra: list = []
    record_check.check(loaded, Results, extra=extra)
    assert not extra, f"fields not declared in posjax.evaluation.results.record: {extra[:5]}"
    results_file.save(str(tmp_path), loaded)
    back = (tmp_path / results_file.RESULTS).read_text(encoding="utf-8")
    if back == text:
        return
    # a migration applied (a file older than a field): only its fields were added
    added = _added(json.loads(text), json.loads(back))
    assert added and {p.rpartition(".")[2] for p in added} <= results_file.MIGRATION_FIELDS, \
        added[:5]


def _minimal() -> dict:
    """The smallest record a folder can hold: one not-applicable cell."""
    versions = dict.fromkeys(("python", "jax", "flax", "numpy", "backend"), "x")
    return {"schema": results_file.SCHEMA, "created": "2026-01-01T00:00:00Z",
            "versions": dict(versions, posjax_commit=None), "settings": {"seed": 0},
            "runs": {"w@1": {"name": "w", "workdir": "w", "step": 1, "scheme": "rope",
                             "trained_length": 8, "causal": False, "config": {}}},
            "cells": {"w@1|as_is{}|L=16|h": {
                "run": "w", "workdir": "w", "step": 1, "scheme": "rope", "trained_length": 8,
                "causal": False, "method": "as_is", "label": "as_is", "params": {},
                "length": 16, "seed": 0, "status": "not_applicable", "reason": "too long"}}}


def test_a_missing_required_field_is_one_error_naming_it(tmp_path):
    good = _minimal()
    (tmp_path / results_file.RESULTS).write_text(json.dumps(good))
    assert results_file.load(str(tmp_path)) == good
    bad = copy.deepcopy(good)
    del bad["cells"]["w@1|as_is{}|L=16|h"]["reason"]
    (tmp_path / results_file.RESULTS).write_text(json.dumps(bad))
    with pytest.raises(results_file.ResultsFileError) as e:
        results_file.load(str(tmp_path))
    message = str(e.value)
    assert "\n" not in message
    assert "cells['w@1|as_is{}|L=16|h'].reason: missing" in message, message
    with pytest.raises(results_file.ResultsFileError, match=r"\.reason: missing"):
        results_file.save(str(tmp_path / "out"), bad)  # and a writer cannot write it
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change, words", [
    (lambda r: r["runs"]["w@1"].update(step="1"), "runs['w@1'].step: '1' is not int"),
    (lambda r: r["cells"]["w@1|as_is{}|L=16|h"].update(status="done"),
     ".status: 'done', not one of"),
    (lambda r: r.update(schema="posjax.extrapolation/1"), "schema 1"),
])
def test_a_wrong_field_is_named(tmp_path, change, words):
    bad = _minimal()
    change(bad)
    with pytest.raises(results_file.ResultsFileError) as e:
        results_file.loads(json.dumps(bad), "x/results.json")
    assert words in str(e.value), str(e.value)
