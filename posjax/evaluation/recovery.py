"""The recovery curve: continued training at a new length, per method, evaluated along the way.

    results = run_recovery(source, variants, length=1536, steps=[0, 100, 300, 1000],
                           settings=batches.Settings(), out_dir="out", root="out/continued")

For each method variant (e.g. Variant('hierarchical', alpha=0.4), Variant('tile')):
  * step 0 is the zero-shot cell: the source run under that method at `length`;
  * one continued run of max(steps) steps (posjax.evaluation.continued) in
    `root/<source>_<method>_L<length>`, saving a checkpoint every gcd(steps) steps and keeping
    them all, so each step s of the curve is the checkpoint of step s of ONE training run
    (one warmup and schedule), evaluated as_is at `length` on the same held-out rows;
  * everything is resumable: training resumes from its latest checkpoint, and evaluated
    cells are found in out_dir/results.json and skipped.
results.json gets a "recovery" section {"<source>|<label>|L=<length>": {source, label,
length, cells: {"<step>": <cell key>}}}; results.md its table and recovery.png the plot.
"""

from __future__ import annotations

import math
import re
import time

from posjax import storage
from posjax.errors import ConfigError
from posjax.evaluation import batches as batches_lib
from posjax.evaluation import continued, methods, report, restore, sweep
from posjax.training import checkpoints


def check_steps(steps) -> list[int]:
    """Sorted distinct steps (ints >= 0, at least one > 0) or ConfigError."""
    ok = isinstance(steps, (list, tuple)) and steps and all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps)
    if not ok or max(steps) < 1:
        raise ConfigError("recovery_steps", steps,
                          "a list of ints >= 0 with at least one > 0, e.g. 0,100,300,1000")
    return sorted({int(s) for s in steps})


def workdir_for(root: str, source: restore.Run, variant: methods.Variant, length: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9.]+", "_", variant.label).strip("_")
    return storage.join(root, f"{source.name.replace('/', '_')}_{slug}_L{length}")


def check(source: restore.Run, variants: list[methods.Variant], length: int, steps) -> None:
    """Every ConfigError the curve can raise, before anything is trained or written."""
    total = max(check_steps(steps))
    for v in variants:
        continued.continued_config(source, v, length, total)


def run_recovery(source: restore.Run, variants: list[methods.Variant], length: int,
                 steps: list[int], settings: batches_lib.Settings, out_dir: str, *,
                 root: str, options: methods.Options | None = None, meta: dict | None = None,
                 progress: bool | None = None) -> dict:
    """Train, evaluate and record the recovery curve of every variant; returns results."""
    steps = check_steps(steps)
    check(source, variants, length, steps)
    options = options or methods.Options()
    positive = [s for s in steps if s > 0]
    every = math.gcd(*positive)
    total = max(positive)
    meta = dict(meta or {}, recovery_steps=steps, recovery_length=length)
    results = None
    for variant in variants:
        workdir = workdir_for(root, source, variant, length)
        done = checkpoints.latest_step(workdir)
        if done is None or done < total:
            t0 = time.perf_counter()
            print(f"eval: continued training {source.name} with {variant.label} -> {workdir} "
                  f"({total} steps at {length}, checkpoint every {every})", flush=True)
            continued.continue_training(source, variant, length, total, workdir,
                                        checkpoint_every=every, progress_bar=progress)
            print(f"eval: continued training done in {time.perf_counter() - t0:.0f}s",
                  flush=True)
        cells = {}
        if 0 in steps:
            cells["0"] = sweep.cell_key(report.run_key(source, out_dir), variant, length,
                                        settings)
            # step 0 is the source's own cell, often evaluated by this run's sweep already:
            # sweep it only when missing (no "already done" line for a cell made minutes ago)
            if cells["0"] not in report.load_or_new(out_dir, meta)["cells"]:
                results = sweep.run_sweep([source], [length], {source.key: [variant]},
                                          settings, options, out_dir, meta=meta,
                                          progress=progress, reliance=False)
        for s in positive:
            run = restore.open_run(workdir, f"{source.name}+{variant.label}@{s}", step=s)
            results = sweep.run_sweep([run], [length], {run.key: [methods.Variant("as_is")]},
                                      settings, options, out_dir, meta=meta, progress=progress,
                                      reliance=False)
            cells[str(s)] = sweep.cell_key(report.run_key(run, out_dir),
                                           methods.Variant("as_is"), length, settings)
        results["recovery"] = dict(results.get("recovery", {}))
        results["recovery"][f"{source.name}|{variant.label}|L={length}"] = {
            "source": source.name, "label": variant.label, "length": int(length),
            "cells": cells}
        report.write_tables(out_dir, results)
        report.write_plots(out_dir, results)
    return results
