"""Runs x test lengths of the algorithmic benchmark, resumable, into out/results.json.

Every cell is results['algorithmic'][<run key>|L=<length>|<settings hash>] (the run key as
the other sweeps': the workdir relative to the results folder @ the checkpoint step), so a
rerun with the same settings skips it. A record: run, workdir, step, scheme, task,
randomized (the run trained with randomized positions), test_positions ('randomized' or
'plain', what this cell used), dropout, length, trained_max_input, seed (the run's training
seed), status 'ok' with rows {correct, count, loss, cluster} (one entry per test sequence,
cluster = its index: the same sequences for every run), overall (one seed's accuracy and loss
with their intervals over sequences), places, padded, rows_per_batch, wall_s, first_batch_s;
or status 'not_applicable' with its reason; cell_s, the cell's whole time. The plan (cells to
score, an estimate of the time from the cells already timed) is printed first, and every
scored cell's line ends with the time left (posjax.evaluation.run.eta). results.json is
written at most every WRITE_EVERY seconds while a run is scored, and with its derived
sections, tables and figures when the run is done (posjax.evaluation.derive.algorithmic,
posjax.evaluation.report.algorithmic: tables, plots).
"""

from __future__ import annotations

import time
from typing import Optional

from tqdm import tqdm

from posjax import schema
from posjax.evaluation.run import eta
from posjax.evaluation.report import report
from posjax.evaluation.results import results_file
from posjax.evaluation.stats import intervals
from posjax.evaluation.derive import seeds as seeds_lib
from posjax.evaluation.run import sweep as sweep_lib
from posjax.evaluation.report.algorithmic import output
from posjax.evaluation.run.algorithmic import scoring
from posjax.evaluation.methods import NotApplicable
from posjax.evaluation.run.restore import Run, conform, load_params

SECTION = "algorithmic"
WRITE_EVERY = 60.0  # seconds between writes of results.json inside one run


def cell_key(run_key: str, length: int, settings: scoring.Settings) -> str:
    return f"{run_key}|L={int(length)}|{settings.key()}"


def _record(run: Run, length: int, settings: scoring.Settings) -> dict:
    data = schema.view(run.config).data
    rml = scoring.randomized(run.config, settings)
    return {"run": run.name, "workdir": run.workdir, "step": run.step, "scheme": run.scheme,
            "task": str(data.task), "randomized": data.randomized_max_length is not None,
            "test_positions": "randomized" if rml is not None else "plain",
            "dropout": settings.dropout, "length": int(length),
            "trained_max_input": scoring.max_input_length(run.config),
            "seed": seeds_lib.config_seed(run.config), "sequences": settings.sequences}


def params_of(run: Run):
    """The run's checkpoint params in the pure-dict layout of its tape model."""
    return conform(scoring.abstract_params(run.config), load_params(run))


def evaluate(run: Run, length: int, settings: scoring.Settings, params) -> dict:
    record = _record(run, length, settings)
    try:
        out = scoring.score(run.config, params, length, settings)
    except NotApplicable as e:
        return dict(record, status="not_applicable", reason=str(e))
    summary = intervals.summarize(out["rows"], seed_of_run=record["seed"], seed=settings.seed)
    record.update(status="ok", rows=out["rows"], overall=summary, n_seeds=1,
                  seeds=[record["seed"]], interval=summary["interval"],
                  **{k: out[k] for k in ("places", "padded", "rows_per_batch", "wall_s",
                                         "first_batch_s")})
    return record


def run_algorithmic(runs: list[Run], lengths: list[int], settings: scoring.Settings,
                    out_dir: str, *, meta: dict, progress: Optional[bool] = None) -> dict:
    """Score every (run, length) not yet in out_dir/results.json; returns the results."""
    settings = scoring.check_settings(settings)
    lengths = scoring.check_lengths(lengths)
    results = report.load_or_new(out_dir, meta)
    results.setdefault(SECTION, {})
    keys = sweep_lib.record_runs(results, runs, out_dir)
    todo = [(run, n) for run in runs for n in lengths
            if cell_key(keys[run.key], n, settings) not in results[SECTION]]
    total = len(runs) * len(lengths)
    clock = eta.Clock([(run.scheme, n) for run, n in todo],
                      eta.timings(results[SECTION].values()))
    tqdm.write(eta.plan_line(total, len(todo), total - len(todo), 0, [], 0, clock, out_dir))
    bar = tqdm(total=total, initial=total - len(todo), desc="algorithmic", dynamic_ncols=True,
               disable=progress is False)
    params, last, dirty = {}, time.perf_counter(), False
    try:
        for i, (run, length) in enumerate(todo):
            if run.key not in params:
                params = {run.key: params_of(run)}  # one run's weights held at a time
            bar.set_postfix_str(f"{run.name} L={length}")
            t0 = time.perf_counter()
            record = evaluate(run, length, settings, params[run.key])
            if record["status"] == "ok":
                record["cell_s"] = time.perf_counter() - t0
            clock.finished(length, record.get("cell_s"), run.scheme)
            record["workdir"] = results_file.relative_workdir(run.workdir, out_dir)
            results[SECTION][cell_key(keys[run.key], length, settings)] = record
            dirty = True
            bar.update(1)
            if record["status"] == "ok":
                o = record["overall"]
                tqdm.write(f"{run.name:>28} L={length:<4} acc {o['accuracy']:.4f} "
                           f"[{o['accuracy_lo']:.4f}, {o['accuracy_hi']:.4f}]  "
                           f"({record['cell_s']:.1f}s; {clock.progress()})")
            done_run = i + 1 == len(todo) or todo[i + 1][0] is not run
            if done_run or time.perf_counter() - last > WRITE_EVERY:
                output.write(out_dir, results, final=done_run)
                last, dirty = time.perf_counter(), False
    finally:
        bar.close()
        if dirty:  # interrupted: keep the cells scored since the last write
            output.write(out_dir, results, final=False)
    if not todo:
        output.write(out_dir, results, final=True)
    return results


def planned_keys(run_key: str, lengths: list[int], settings: scoring.Settings) -> list[str]:
    """The cell keys a request plans for one run (the driver's check for runs whose workdir
    is gone while results.json holds every cell)."""
    return [cell_key(run_key, n, settings) for n in scoring.check_lengths(lengths)]
