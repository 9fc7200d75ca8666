"""Figures redrawn while a sweep runs: throttled by their own cost, always at the end, and a
stopped sweep leaves readable PNGs of the cells it finished."""

from __future__ import annotations

import json
import os

import pytest
from matplotlib import image

from posjax.evaluation import driver
from posjax.evaluation.report import plots
from posjax.evaluation.run import sweep as sweep_lib
from tests.evaluation.conftest import sweep_request


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_redraws_are_at_most_a_tenth_of_the_time():
    clock = FakeClock()
    drawn = []

    def draw():
        drawn.append(clock.t)
        clock.t += 1.0  # a redraw takes 1 s

    r = plots.Redrawer(draw, every=10, clock=clock)
    r.after_cell()  # the first cell: always
    for _ in range(30):  # cells of 2 s each: a redraw is due after 10 s
        clock.t += 2.0
        r.after_cell()
    assert drawn[:4] == [0.0, 11.0, 22.0, 33.0]  # 10 s of cells after each 1 s redraw
    assert r.spent <= 0.1 * clock.t + 1.0
    count = r.count
    r.now()  # the end: always
    assert r.count == count + 1


@pytest.mark.slow  # sweeps the tiny model (session fixture) until it is stopped
def test_a_stopped_sweep_leaves_its_figures(trained_workdir, monkeypatch, tmp_path):
    real = sweep_lib.evaluate_cell
    calls = []

    def stopping(*args):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(args[1:3])
        return real(*args)

    monkeypatch.setattr(sweep_lib, "evaluate_cell", stopping)
    with pytest.raises(KeyboardInterrupt):
        driver.run(sweep_request(tmp_path, trained_workdir))
    # reliance (2 cells at the training length), then the first length: two lines
    for name in ("accuracy_vs_length.png", "results.md", "results.json"):
        assert os.path.getsize(tmp_path / name) > 0, name
    picture = image.imread(str(tmp_path / "accuracy_vs_length.png"))
    assert picture.ndim == 3 and picture.shape[0] > 200 and picture.shape[1] > 400
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]  # no half-written file


def test_a_results_file_written_mid_sweep_redraws_with_its_seed_groups(tmp_path, monkeypatch):
    from posjax.evaluation.report import report
    from posjax.evaluation.report.figures import lines
    from tests.evaluation.test_seeds import _results

    report.write_cells(str(tmp_path), _results())  # as after a cell: no derived sections
    saved = json.load(open(tmp_path / "results.json"))
    assert "seed_cells" not in saved
    drawn = []
    real = plots.write_all

    def spy(out_dir, results, skip_runs=frozenset()):
        drawn.append({ln.run for ln in lines.mlm_lines(results)})
        return real(out_dir, results, skip_runs)

    monkeypatch.setattr(plots, "write_all", spy)
    paths = plots.write_folder(str(tmp_path), str(tmp_path / "figures"))
    assert any(p.endswith("accuracy_vs_length.png") for p in paths)
    # one line per seed group (scheme), not one per seed's run
    assert drawn == [{"rope", "alibi"}]
