"""Task cells: runs x lengths x method variants x tasks, one cell at a time, resumable.

A cell evaluates one task at one length with one method. Retrieval tasks (passkey, needle,
copy_span) score `rows_per_depth` generated rows at each depth of the grid (the same keys and
filler starts at every length and method, posjax.data.tasks); longdoc (longdoc.py) scores the
MLM inside single long documents. Each finished cell goes into results.json under 'tasks',
keyed  <run key>|<method><params>|L=<length>|<task>|<settings hash>, so a rerun skips it.
A retrieval record keeps the per-row sums (`rows`: correct, count, loss, depth, distance),
`overall` and `depths` (scoring.summary with 95% intervals over rows); a cell the method or
the length cannot hold is 'not_applicable' with its reason, never a crash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from typing import Optional

from tqdm import tqdm

from posjax import schema
from posjax.data import pipeline
from posjax.data import tasks as tasks_lib
from posjax.errors import ConfigError
from posjax.evaluation.run import batches as batches_lib
from posjax.evaluation import methods
from posjax.evaluation.run import metrics
from posjax.evaluation.report import report
from posjax.evaluation.results import results_file
from posjax.evaluation.derive import seeds as seeds_lib
from posjax.evaluation.run import sweep as sweep_lib
from posjax.evaluation.report.plots import Redrawer
from posjax.evaluation.run.restore import Run
from posjax.evaluation.run.tasks import longdoc
from posjax.evaluation.report.tasks import plots, tables
from posjax.evaluation.stats import task_scores as scoring

TASK_VERSION = 1


@dataclasses.dataclass(frozen=True)
class TaskSettings:
    tasks: tuple = ()
    rows_per_depth: int = 20
    digits: int = tasks_lib.DIGITS
    depths: tuple = tasks_lib.DEPTHS

    def key(self, task: str, settings: batches_lib.Settings) -> str:
        if task == "longdoc":  # longdoc is the held-out stream: the MLM settings decide it
            fields = [TASK_VERSION, task, settings.key()]
        else:
            fields = [TASK_VERSION, task, self.rows_per_depth, self.digits, list(self.depths),
                      settings.seed, settings.corpus, settings.data_path, settings.max_documents]
        return hashlib.blake2b(json.dumps(fields).encode(), digest_size=4).hexdigest()


def check(t: TaskSettings) -> TaskSettings:
    names = [tasks_lib.check_task(n) for n in t.tasks]
    if not names:
        raise ConfigError("tasks", ",".join(t.tasks), f"some of {', '.join(tasks_lib.TASKS)}")
    if isinstance(t.rows_per_depth, bool) or not isinstance(t.rows_per_depth, int) or \
            t.rows_per_depth < 1:
        raise ConfigError("task_rows", t.rows_per_depth, "a positive int (rows per depth)")
    if isinstance(t.digits, bool) or not isinstance(t.digits, int) or not 1 <= t.digits <= 64:
        raise ConfigError("task_digits", t.digits, "an int in [1, 64] (answer tokens)")
    depths = tuple(tasks_lib.common.check_depth(d) for d in t.depths)
    return dataclasses.replace(t, tasks=tuple(dict.fromkeys(names)), depths=depths)


_FILLER: dict = {}
_ROWS: dict = {}


def filler(run: Run, settings: batches_lib.Settings):
    """The run's held-out split as filler (cached per data config and vocabulary)."""
    cfg = batches_lib.data_config(run, settings)
    key = (json.dumps({k: schema.given(cfg, f"data.{k}") for k in batches_lib.DATA_KEYS},
                      sort_keys=True, default=str), run.tokenizer.fingerprint())
    if key not in _FILLER:
        corpus = pipeline.tokenized(cfg, run.tokenizer, "heldout", settings.cache_dir)
        vocab = tasks_lib.task_vocab(run.tokenizer)
        _FILLER[key] = tasks_lib.filler_stream(corpus.tokens, vocab, run.tokenizer.num_special)
    return _FILLER[key]


def task_rows(run: Run, task: str, length: int, t: TaskSettings,
              settings: batches_lib.Settings) -> tasks_lib.TaskRows:
    stream = filler(run, settings)
    key = (id(stream), task, length, t, settings.seed)
    if key not in _ROWS:
        _ROWS.clear()
        _ROWS[key] = tasks_lib.generate(task, run.tokenizer, stream, length, depths=t.depths,
                                        rows_per_depth=t.rows_per_depth, seed=settings.seed,
                                        digits=t.digits)
    return _ROWS[key]


def evaluate_task_cell(run: Run, variant: methods.Variant, length: int, task: str,
                       t: TaskSettings, settings: batches_lib.Settings,
                       options: methods.Options) -> dict:
    record = dict(sweep_lib._base_record(run, variant, length, settings), task=task)
    if record["causal"]:
        return dict(record, status="not_applicable",
                    reason="tasks ask masked-LM questions: encoders only (model.causal)")
    if task != "longdoc":
        need = tasks_lib.needed(task, tasks_lib.task_vocab(run.tokenizer), t.digits) + 2
        if length < need:
            return dict(record, status="not_applicable",
                        reason=f"{task} with {t.digits}-token keys needs rows of >= {need} tokens")
    try:
        cell, params, scorer = sweep_lib.prepare_cell(run, variant, length, record, options)
        if task == "longdoc":
            return longdoc.evaluate(run, length, settings, record, cell, params, scorer)
    except methods.NotApplicable as e:
        return dict(record, status="not_applicable", reason=str(e))
    rows = task_rows(run, task, length, t, settings)
    inputs = batches_lib.for_method(rows.arrays, cell.window, False)
    acc = metrics.Accumulator(metrics.bucket_edges(run.trained_length, length))
    per_batch = batches_lib.rows_per_batch(length, len(rows.depth), settings)
    t0 = time.perf_counter()
    compile_s = sweep_lib.score_batches(scorer, params, inputs, acc, per_batch)
    sums = acc.rows()
    record["rows"] = dict(sums, depth=rows.depth.tolist(), distance=rows.distance.tolist())
    record["overall"] = scoring.summary(sums, seed=settings.seed)
    record["depths"] = scoring.by_depth(sums, rows.depth, seed=settings.seed)
    record.update(n_seeds=1, seeds=[seeds_lib.config_seed(run.config)],
                  interval=record["overall"]["interval"])
    record.update(status="ok", digits=t.digits, wall_s=time.perf_counter() - t0,
                  first_batch_s=compile_s, rows_per_batch=per_batch)
    return record


def task_key(run_key: str, variant: methods.Variant, length: int, task: str, t: TaskSettings,
             settings: batches_lib.Settings) -> str:
    return f"{run_key}|{variant.key()}|L={length}|{task}|{t.key(task, settings)}"


def run_tasks(runs: list[Run], lengths: list[int], run_variants: dict, t: TaskSettings,
              settings: batches_lib.Settings, options: methods.Options, out_dir: str, *,
              meta: dict, progress: Optional[bool] = None) -> dict:
    """Every task cell not yet in out_dir/results.json; returns the results dict."""
    results = report.load_or_new(out_dir, meta)
    results.setdefault("tasks", {})
    keys = sweep_lib.record_runs(results, runs, out_dir)
    # tasks innermost: the cells of one (length, method) share one compiled scorer
    cells = [(run, v, n, task) for run in runs for n in lengths
             for v in run_variants[run.key] for task in t.tasks]
    todo = [c for c in cells if task_key(keys[c[0].key], c[1], c[2], c[3], t, settings)
            not in results["tasks"]]
    bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc="tasks",
               dynamic_ncols=True, disable=progress is False)
    figures = Redrawer(lambda: plots.write_all(out_dir, results))
    try:
        for run, variant, length, task in todo:
            bar.set_postfix_str(f"{run.name} {task} {variant.label} L={length}")
            record = evaluate_task_cell(run, variant, length, task, t, settings, options)
            record["workdir"] = results_file.relative_workdir(run.workdir, out_dir)
            results["tasks"][task_key(keys[run.key], variant, length, task, t, settings)] = record
            report.write_tables(out_dir, results)
            tables.write(out_dir, results)
            figures.after_cell()
            bar.update(1)
            if record["status"] == "ok":
                tqdm.write(f"{run.name:>16} {task:<9} L={length:<6} {variant.label:<24} "
                           f"{tables.headline(record)}  ({record['wall_s']:.1f}s)")
    finally:  # a stopped sweep leaves the figures of every cell it finished
        bar.close()
        figures.now()
    report.write_tables(out_dir, results)
    tables.write(out_dir, results)
    return results
