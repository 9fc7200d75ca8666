"""The recovery curve: continued training at a new length, per method, evaluated along the way.

    results = run_recovery(source, variants, length=1536, steps=[0, 100, 300, 1000],
                           settings=batches.Settings(), out_dir="out", root="out/continued",
                           seeds=[0, 1, 2])

For each seed (outermost: seed 0 of every method is done before seed 1 starts) and each method
variant (e.g. Variant('hierarchical', alpha=0.4), Variant('tile')):
  * step 0 is the zero-shot cell: the source run under that method at `length` (the same cell
    for every seed);
  * one continued run of max(steps) steps (posjax.evaluation.run.continued) in
    `root/<source>_<method>_L<length>[_constant][_s<seed>]`, saving a checkpoint every
    gcd(steps) steps and keeping them all, so each step s of the curve is the checkpoint of
    step s of ONE training run at a constant learning rate after its warmup, evaluated as_is
    at `length` on the same held-out rows;
  * `truncate` is the curve's control: the same continued training at the trained length
    (posjax.evaluation.run.continued), each checkpoint read as truncate at `length`, the same
    rows as every other curve's cells;
  * everything is resumable: training resumes from its latest checkpoint, and evaluated
    cells are found in out_dir/results.json and skipped.
`seeds=None` is one continued run with the source's seed (no _s suffix); schedule='linear' the
source's decaying schedule (no _constant suffix: the names runs had before the constant rate).
results.json gets a "recovery" section {"<source>|<label>|L=<length>[|<schedule>|seed=<k>]":
{source, label, length, seed, schedule, tokens_per_step, cells: {"<step>": <cell key>}}};
results.md its tables, recovery.png the plot, and with several seeds the seed-aware answer
(posjax.evaluation.report.recovery_seeds: recovery_answer.md/json, recovery_seeds.png).
"""

from __future__ import annotations

import math
import re
import time

from posjax import schema, storage
from posjax.errors import ConfigError
from posjax.evaluation.run import batches as batches_lib
from posjax.evaluation.run import continued, restore, sweep
from posjax.evaluation import methods
from posjax.evaluation.report import plots, recovery_seeds, report
from posjax.evaluation.results import results_file
from posjax.training import checkpoints


def check_steps(steps) -> list[int]:
    """Sorted distinct steps (ints >= 0, at least one > 0) or ConfigError."""
    ok = isinstance(steps, (list, tuple)) and steps and all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps)
    if not ok or max(steps) < 1:
        raise ConfigError("recovery_steps", steps,
                          "a list of ints >= 0 with at least one > 0, e.g. 0,100,300,1000")
    return sorted({int(s) for s in steps})


def _tag(seed: int | None, schedule: str, sep: str) -> str:
    """What tells apart continued runs of one method: '' for the linear schedule and the
    source's seed (the older runs' names), else e.g. '_constant_s1'."""
    return (sep + schedule if schedule != "linear" else "") + (
        f"{sep}s{seed}" if seed is not None else "")


def workdir_for(root: str, source: restore.Run, variant: methods.Variant, length: int, *,
                seed: int | None = None, schedule: str = "constant") -> str:
    slug = re.sub(r"[^A-Za-z0-9.]+", "_", variant.label).strip("_")
    return storage.join(root, f"{source.name.replace('/', '_')}_{slug}_L{length}"
                              f"{_tag(seed, schedule, '_')}")


def curve_key(source: restore.Run, variant: methods.Variant, length: int, *,
              seed: int | None = None, schedule: str = "constant") -> str:
    key = f"{source.name}|{variant.label}|L={length}"
    if schedule != "linear" or seed is not None:
        key += f"|{schedule}|seed={seed}"
    return key


def check_seeds(seeds) -> list | None:
    """None (the source's seed) or the distinct seeds in order, each an int >= 0."""
    if seeds is None:
        return None
    if not isinstance(seeds, (list, tuple)) or not seeds:
        raise ConfigError("continue_seeds", seeds, "a non-empty list of ints >= 0")
    for seed in seeds:
        continued.check_options(seed=seed)
    return list(dict.fromkeys(int(s) for s in seeds))


def check(source: restore.Run, variants: list[methods.Variant], length: int, steps, *,
          seeds=None, schedule: str = "constant", batch_size: int | None = None) -> None:
    """Every ConfigError the curve can raise, before anything is trained or written."""
    total = max(check_steps(steps))
    for seed in check_seeds(seeds) or [None]:
        for v in variants:
            continued.continued_config(source, v, length, total, seed=seed, schedule=schedule,
                                       batch_size=batch_size)


def _scored(variant: methods.Variant) -> methods.Variant:
    """How a curve's checkpoints are read at its length: as they are, or in truncate's windows
    (the control, trained at the trained length)."""
    return methods.Variant(methods.TRUNCATE if variant.method == methods.TRUNCATE else "as_is")


def _checkpoint_cell(out_dir: str, workdir: str, step: int, length: int,
                     settings: batches_lib.Settings, scored: methods.Variant) -> str:
    """The results.json key of checkpoint `step`'s cell (sweep.cell_key of its run)."""
    run = f"{results_file.relative_workdir(workdir, out_dir)}@{step}"
    return f"{run}|{scored.key()}|L={length}|{settings.key()}"


def _load(out_dir: str) -> dict | None:
    """out_dir's record (None where it has none yet)."""
    return report.check_out(out_dir)


def _evaluated(results: dict | None, keys: list[str]) -> bool:
    """Whether `results` holds an ok cell under every key."""
    return results is not None and all(
        k in results["cells"] and results["cells"][k]["status"] == "ok" for k in keys)


def _drop_unused(workdir: str, keep: set) -> None:
    """Remove the checkpoints between the curve's steps (saved every gcd(steps) steps so the
    run can resume; each is params + optimizer state, ~250 MB for MiniLM) once the run has
    reached its last step; step 0 and the curve's steps stay."""
    directory = checkpoints.checkpoint_dir(workdir)
    for name in storage.listdir(directory):
        if name.isdigit() and int(name) not in keep | {0}:
            storage.path(storage.join(directory, name)).rmtree()


def run_recovery(source: restore.Run, variants: list[methods.Variant], length: int,
                 steps: list[int], settings: batches_lib.Settings, out_dir: str, *,
                 root: str, options: methods.Options | None = None, meta: dict | None = None,
                 progress: bool | None = None, seeds: list | None = None,
                 schedule: str = "constant", batch_size: int | None = None) -> dict:
    """Train, evaluate and record the recovery curve of every variant; returns results."""
    steps = check_steps(steps)
    seeds = check_seeds(seeds)
    check(source, variants, length, steps, seeds=seeds, schedule=schedule,
          batch_size=batch_size)
    options = options or methods.Options()
    meta = dict(meta or {}, recovery_steps=steps, recovery_length=length,
                continue_seeds=seeds, continue_schedule=schedule)
    results = None
    for seed in seeds or [None]:
        for variant in variants:
            results = _one_curve(source, variant, length, steps, settings, out_dir, root=root,
                                 options=options, meta=meta, progress=progress, seed=seed,
                                 schedule=schedule, batch_size=batch_size)
    return results


def _one_curve(source, variant, length, steps, settings, out_dir, *, root, options, meta,
               progress, seed, schedule, batch_size) -> dict:
    """Train (or resume) one continued run and evaluate its checkpoints; returns results."""
    positive = [s for s in steps if s > 0]
    every = math.gcd(*positive)
    total = max(positive)
    cfg = continued.continued_config(source, variant, length, total, checkpoint_every=every,
                                     seed=seed, schedule=schedule, batch_size=batch_size)
    tokens_per_step = int(cfg.data.batch_size) * int(cfg.data.seq_len)
    workdir = workdir_for(root, source, variant, length, seed=seed, schedule=schedule)
    done = checkpoints.latest_step(workdir)
    scored = _scored(variant)
    keys = {s: _checkpoint_cell(out_dir, workdir, s, length, settings, scored)
            for s in positive}
    # every checkpoint's cell already in results.json: nothing to train or score (the workdir
    # may be gone, e.g. results.json carried to another machine)
    finished = _evaluated(_load(out_dir), list(keys.values()))
    if not finished and (done is None or done < total):
        t0 = time.perf_counter()
        print(f"eval: continued training {source.name} with {variant.label} -> {workdir} "
              f"({total} steps of {tokens_per_step} tokens at {cfg.data.seq_len}, {schedule} learning "
              f"rate, seed {schema.view(cfg).seed}, checkpoint every {every})", flush=True)
        continued.continue_training(source, variant, length, total, workdir,
                                    checkpoint_every=every, progress_bar=progress, seed=seed,
                                    schedule=schedule, batch_size=batch_size)
        print(f"eval: continued training done in {time.perf_counter() - t0:.0f}s", flush=True)
        _drop_unused(workdir, set(steps))
    cells = {}
    results = _load(out_dir)
    if 0 in steps:
        cells["0"] = sweep.cell_key(report.run_key(source, out_dir), variant, length,
                                    settings)
        # step 0 is the source's own cell, often evaluated by this run's sweep already:
        # sweep it only when missing (no "already done" line for a cell made minutes ago)
        if results is None or cells["0"] not in results["cells"]:
            results = sweep.run_sweep([source], [length], {source.key: [variant]}, settings,
                                      options, out_dir, meta=meta, progress=progress,
                                      reliance=False)
    for s in positive:
        if not finished:
            run = restore.open_run(
                workdir, f"{source.name}+{variant.label}{_tag(seed, schedule, '+')}@{s}",
                step=s)
            results = sweep.run_sweep([run], [length], {run.key: [scored]}, settings, options,
                                      out_dir, meta=meta, progress=progress, reliance=False)
        cells[str(s)] = keys[s]
    for s in positive:  # the continued run's seed beside the mask seed, to group cells by it
        results["cells"][cells[str(s)]]["continue_seed"] = int(schema.view(cfg).seed)
    results["recovery"] = dict(results_file.section(results, "recovery"))
    results["recovery"][curve_key(source, variant, length, seed=seed, schedule=schedule)] = {
        "source": source.name, "label": variant.label, "length": int(length),
        "seed": int(schema.view(cfg).seed), "schedule": schedule,
        "tokens_per_step": tokens_per_step, "cells": cells}
    report.write_tables(out_dir, results)
    plots.write_plots(out_dir, results)
    recovery_seeds.write(out_dir, results)  # the answer so far, after every curve
    return results
