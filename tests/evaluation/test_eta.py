"""The sweep's plan line and time left (posjax.evaluation.run.eta), and train.py's ETA."""

from __future__ import annotations

import json
import math
import os
import shutil

import pytest

from posjax.evaluation.run import batches as batches_lib
from posjax.evaluation import driver, methods
from posjax.evaluation.run import eta, restore, sweep
from posjax.evaluation.report import report
from posjax.evaluation.results import results_file
from posjax.training import progress
from tests.evaluation.conftest import TRAINED, sweep_request


def test_duration_reads_as_a_log_line_prints_it():
    assert [progress.duration(s) for s in (0, 44.6, 65, 3599, 3600 * 3 + 7 * 60)] == [
        "0s", "45s", "1m05s", "59m59s", "3h07m"]


def test_clock_takes_the_nearest_timed_length_and_counts_down():
    clock = eta.Clock([64, 64, 256], [])
    assert clock.seconds_left() is None and clock.progress() == "0/3 scored"
    clock.finished(64, 10.0)
    assert clock.seconds_left() == pytest.approx(20.0)  # one timed length: its mean for all
    clock.finished(64, 12.0)
    assert clock.progress() == "2/3 scored, ETA 11s"
    # no trend stretched past the timed lengths: 8192 costs what 128 did; between two timed
    # lengths, the line through them in log time over log length
    clock = eta.Clock([96, 8192], [(32, 10.0), (128, 20.0)])
    between = 10.0 * 2.0 ** (math.log(3) / math.log(4))
    assert clock.seconds_left() == pytest.approx(between + 20.0)
    clock.finished(8192, 75.0)
    assert clock.progress() == f"1/2 scored, ETA {progress.duration(between)}"


def test_a_slow_schemes_cells_are_estimated_at_its_own_pace():
    # Two schemes timed at 64, only "fast" also at 8192. "slow" took 30 s at 64, 1.5x the mean
    # there (20 s), so its 8192 cell is the 8192 estimate (60 s) x 1.5; "fast" keeps its own
    # 8192 mean; a scheme with no timed cell takes the estimate over all of them.
    clock = eta.Clock([("slow", 8192), ("fast", 8192), ("new", 64), ("slow", 64)],
                      [(64, 10.0, "fast"), (8192, 60.0, "fast"), (64, 30.0, "slow")])
    assert clock.seconds_left() == pytest.approx(60.0 * 1.5 + 60.0 + 20.0 + 30.0)
    clock.finished(64, 50.0, "slow")  # slow's own 64 mean is now 40 s (ratio 40 / 30)
    assert clock.left == [("slow", 8192), ("fast", 8192), ("new", 64)]
    known = 30.0  # all runs' mean at 64: (10 + 30 + 50) / 3
    pace = math.exp((math.log(30.0 / known) + math.log(50.0 / known)) / 2)
    assert clock.seconds_left() == pytest.approx(60.0 * pace + 60.0 + known)
    # the records' schemes carry the pace (every seed of a scheme): eta.timings reads them
    cells = {"a": dict(status="ok", length=64, cell_s=5.0, run="r_seed1", scheme="r"),
             "b": dict(status="error", length=64, run="r", scheme="r")}
    assert eta.timings(cells.values()) == [(64, 5.0, "r")]


def test_probe_estimates_stand_in_until_a_cell_at_their_length_is_timed():
    clock = eta.Clock([64, 64, 1024], [])
    clock.probed = {64: 4.0, 1024: 40.0}
    assert clock.seconds_left() == pytest.approx(48.0)
    assert eta.plan_line(3, 3, 0, 0, [], 0, clock, "o").endswith(
        "; about 48s (from a timed probe at L=64, L=1024)")
    clock.finished(64, 6.0)  # a real cell replaces its length's probe estimate
    assert clock.seconds_left() == pytest.approx(46.0)


def test_plan_line_names_every_count_and_where_done_cells_are():
    clock = eta.Clock([16] * 4, [(16, 30.0)])
    line = eta.plan_line(12, 4, 3, 2, ["runs/a"], 3, clock, "runs/b")
    assert line == ("eval: plan: 12 cells: 4 to score, 5 done (3 in runs/b, 2 reused from "
                    "runs/a), 3 not applicable; about 2m00s (at the pace of 1 timed cells)")
    fresh = eta.plan_line(3, 3, 0, 0, [], 0, eta.Clock([16] * 3, []), "o")
    assert fresh.endswith("3 to score, 0 done, 0 not applicable; time: estimated after the "
                          "first cell")


def test_training_log_line_ends_with_the_time_left(tmp_path, capsys):
    logger = progress.Logger(str(tmp_path), 100, 0, flops_per_step=1.0, tokens_per_step=10,
                             num_devices=1, enable_bar=False)
    for _ in range(10):
        logger.step_done()
    values = logger.log_train(10, {"loss": 2.0, "learning_rate": 1e-3})
    logger.close()
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("step 10 | loss 2.0000") and "tokens/s" in line
    left = values["step_time_s"] * 90
    assert line.endswith(f"ETA {progress.duration(left)}")


@pytest.mark.slow  # a sweep of the tiny model (session fixture) and two of its cells again
def test_sweep_prints_its_plan_first_then_a_line_per_cell(sweep, trained_workdir, tmp_path,
                                                          capsys):
    out = str(tmp_path)  # as deep as the sweep's folder: the same relative workdir in its keys
    shutil.copytree(sweep[0], out, dirs_exist_ok=True)
    path = os.path.join(out, results_file.RESULTS)
    saved = json.load(open(path))
    dropped = [k for k, c in saved["cells"].items() if c["length"] == 2 * TRAINED]
    assert len(dropped) == 2  # hierarchical ok; as_is past the table: not applicable
    for k in dropped:
        saved["cells"].pop(k)
    report.atomic_write(path, json.dumps(saved))
    capsys.readouterr()
    driver.run(sweep_request(out, trained_workdir))
    lines = capsys.readouterr().out.strip().splitlines()
    timed = len([c for c in saved["cells"].values() if c["status"] == "ok"])
    assert lines[0].startswith(f"eval: plan: 7 cells: 1 to score, 5 done (5 in {out}), 1 not "
                               f"applicable; about ")
    assert lines[0].endswith(f"(at the pace of {timed} timed cells)")
    (cell_line,) = [ln for ln in lines[1:] if f"L={2 * TRAINED}" in ln]
    assert cell_line.endswith("; 1/1 scored, done)")


@pytest.mark.slow  # builds and compiles the tiny model's scorer at two lengths
def test_probe_times_the_first_cell_and_the_far_longest_and_records_nothing(trained_workdir):
    run = restore.open_run(trained_workdir)
    settings = batches_lib.Settings(masked_tokens=120, batch_tokens=256)
    first = (run, methods.Variant("as_is"), TRAINED)
    far = (run, methods.Variant("hierarchical", alpha=0.4), sweep.PROBE_FAR * TRAINED)
    near = (run, methods.Variant("hierarchical", alpha=0.4), 2 * TRAINED)
    estimates = sweep.probe([first, near, far], settings, methods.Options())
    assert sorted(estimates) == [TRAINED, sweep.PROBE_FAR * TRAINED]
    assert all(s > 0 for s in estimates.values())
    # a longest length nearer than PROBE_FAR x the first is not probed; nothing is not probed
    assert sorted(sweep.probe([first, near], settings, methods.Options())) == [TRAINED]
    assert sweep.probe([], settings, methods.Options()) == {}


def test_a_schemes_pace_is_read_at_its_timed_length_nearest_the_cell():
    """A scheme whose cost grows with the pairs (DAPE) is as fast as the rest at 64 and slower
    at 2048: its 8192 cell takes its 2048 ratio (180 s against the 2048 mean of 100: 1.8),
    not the mean over 64 and 2048 (sqrt(1.8))."""
    timed = [(64, 10.0, "rope"), (2048, 20.0, "rope"), (8192, 40.0, "rope"),
             (64, 10.0, "dape"), (2048, 180.0, "dape")]
    clock = eta.Clock([("dape", 8192), ("dape", 64)], timed)
    assert clock.seconds_left() == pytest.approx(40.0 * 1.8 + 10.0)
