"""Cells of the same weights scored before are reused, not scored again: the README's order
(eval one run, then compare it with a second run in another folder, --reuse naming the first)
scores only the new run's cells; the local cell cache does the same across folders."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from posjax.errors import ConfigError
from posjax.evaluation import driver
from posjax.evaluation.run import reuse
from posjax.evaluation.results import results_file
from posjax.evaluation.run import sweep as sweep_lib
from tests.evaluation.conftest import LENGTHS, sweep_request

# Slow tier: the tiny models (session fixtures) and sweeps over them.
pytestmark = pytest.mark.slow


@pytest.fixture
def counted(monkeypatch):
    calls = []
    real = sweep_lib.evaluate_cell

    def counting(run, variant, length, settings, options):
        calls.append((run.name, variant.label, length))
        return real(run, variant, length, settings, options)

    monkeypatch.setattr(sweep_lib, "evaluate_cell", counting)
    return calls


def test_compare_after_the_first_eval_scores_only_the_new_cells(sweep, trained_workdir,
                                                                nope_workdir, tmp_path, counted,
                                                                capsys):
    first, earlier = sweep
    out = tmp_path / "compare"
    request = dataclasses.replace(sweep_request(out, trained_workdir),
                                  workdirs=[trained_workdir, nope_workdir], methods=["as_is"],
                                  reuse=[first])
    capsys.readouterr()
    results = driver.run(request)
    plan = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("eval: plan:")]
    # the new run's as_is per length and its reliance pair; every tiny_learned cell is reused
    # but as_is past the table (not applicable, scored again: it costs no scoring)
    assert sorted(counted) == sorted(
        [("tiny_none", "as_is", n) for n in LENGTHS] + [("tiny_none", "as_is shuffled", 16),
                                                        ("tiny_learned", "as_is", 32)])
    assert plan == [f"eval: plan: 8 cells: 4 to score, 3 done (3 reused from {first}), 1 not "
                    "applicable; about " + plan[0].split("; about ")[1]]
    source = {k.partition("|")[2]: c for k, c in earlier["cells"].items()}
    reused = [(k, c) for k, c in results["cells"].items() if c.get("reused")]
    assert len(reused) == 3
    for key, c in reused:
        original = source[key.partition("|")[2]]
        assert c["reused"] == {"from": first, "key": next(
            k for k in earlier["cells"] if k.partition("|")[2] == key.partition("|")[2])}
        assert c["overall"] == original["overall"] and c["rows"] == original["rows"]
        assert c["workdir"] == results_file.relative_workdir(trained_workdir, str(out))
    saved = json.load(open(out / "results.json"))
    assert {k for k, c in saved["cells"].items() if c.get("reused")} == {k for k, _ in reused}
    # a rerun into the same folder finds everything there: nothing scored, nothing reused
    counted.clear()
    again = driver.run(request)
    assert counted == [] and again["cells"].keys() == results["cells"].keys()


def test_cells_of_other_method_options_are_not_reused(sweep, trained_workdir, tmp_path, counted):
    request = dataclasses.replace(sweep_request(tmp_path / "other", trained_workdir),
                                  methods=["as_is"], reuse=[sweep[0]], rope_factor=2.0)
    results = driver.run(request)
    assert not any(c.get("reused") for c in results["cells"].values())
    assert len(counted) == len(LENGTHS) + 1  # and the shuffled-positions cell


def test_the_cell_cache_serves_another_folder(trained_workdir, tmp_path, counted, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    request = dataclasses.replace(sweep_request(tmp_path / "a", trained_workdir),
                                  lengths=[16], methods=["as_is"], cell_cache=True,
                                  reliance=False)
    driver.run(request)
    assert counted == [("tiny_learned", "as_is", 16)]
    assert len(os.listdir(reuse.cache_dir())) == 1
    results = driver.run(dataclasses.replace(request, out=str(tmp_path / "b")))
    assert counted == [("tiny_learned", "as_is", 16)]
    (c,) = results["cells"].values()
    assert c["reused"] == {"from": f"cell cache {reuse.cache_dir()}"}


def test_a_reuse_folder_without_results_is_one_config_error(trained_workdir, tmp_path):
    with pytest.raises(ConfigError, match="reuse"):
        driver.run(dataclasses.replace(sweep_request(tmp_path / "o", trained_workdir),
                                       reuse=[str(tmp_path / "nothing")]))
