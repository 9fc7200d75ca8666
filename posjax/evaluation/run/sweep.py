"""The sweep: runs x lengths x method variants, one cell at a time, resumable.

Every finished cell (status 'ok' or 'not_applicable') is written to results.json at once
(atomically; the csv / markdown tables and the figures follow when due and at the end:
posjax.evaluation.report.plots.Redrawer), keyed by
    <workdir>@<checkpoint step> | <method><params> | L=<length> | <data settings hash>
(the workdir relative to the output folder, so the folder can be committed and read on
another machine; older files keyed by absolute paths are rekeyed on load), so a rerun with
the same settings skips it, and an interrupted sweep loses at most the cell it was in.
Each cell builds its model once and compiles its scoring function once (all batches of a cell
have one shape); lengths are the outer loop so evaluation rows are made once per length.

Every cell keeps the per-row sums of its scored tokens (`rows`: loss, correct, count and the
row's document `cluster`), its 95% intervals (`overall.accuracy_lo` ..., the method in
`interval`; n_seeds 1 and `seeds` [its training seed]: posjax.evaluation.derive.seeds averages
seeds), and how many rows cross a document boundary (`crossing_rows`). Position reliance:
`plan` adds, per run, the as_is cell at the training length and the same with shuffled
position ids (Variant(shuffle=True)); posjax.evaluation.report.report pairs them.
"""

from __future__ import annotations

import json
import time
from typing import Optional

import jax
from flax import nnx
from tqdm import tqdm

from posjax import models, schema
from posjax.evaluation.run import batches as batches_lib
from posjax.evaluation.run import eta, metrics
from posjax.evaluation import methods
from posjax.evaluation.report import plots, report
from posjax.evaluation.results import results_file
from posjax.evaluation.stats import intervals
from posjax.evaluation.derive import seeds as seeds_lib
from posjax.errors import ConfigError
from posjax.evaluation.run.restore import Run, conform, load_params, weights_digest
from posjax.evaluation.run.reuse import Reuse
from posjax.training.state import abstract_model

_SCORERS: dict = {}


def _model_key(config) -> str:
    """The config without what cannot change the scorer (training and batching fields)."""
    d = config.to_dict()
    for k in ("train", "seed", "checkpoint", "logging"):
        d.pop(k, None)
    if "data" in d:
        d["data"].pop("batch_size", None)
    return json.dumps(d, sort_keys=True, default=str)


def cell_key(run_key: str, variant: methods.Variant, length: int,
             settings: batches_lib.Settings) -> str:
    """`run_key` is report.run_key(run, out_dir): the workdir relative to the output folder."""
    return f"{run_key}|{variant.key()}|L={length}|{settings.key()}"


def _base_record(run: Run, variant: methods.Variant, length: int,
                 settings: batches_lib.Settings) -> dict:
    return {
        "run": run.name, "workdir": run.workdir, "step": run.step, "scheme": run.scheme,
        "trained_length": run.trained_length, "causal": bool(schema.view(run.config).model.causal),
        "method": variant.method, "label": variant.label, "params": variant.params,
        "length": int(length), "seed": settings.seed,
    }


def prepare_cell(run: Run, variant: methods.Variant, length: int, record: dict,
                 options: methods.Options):
    """(cell, params, scorer) for `variant` at `length`; raises methods.NotApplicable.
    Adds the cell's details to `record`."""
    cell = methods.make_cell(run, variant, length, options)
    graphdef, abs_params, _, _ = abstract_model(cell.config, models.build_model)
    abstract = nnx.to_pure_dict(abs_params)
    try:
        params = conform(abstract, cell.rewrite(load_params(run)))
    except KeyError as e:
        raise methods.NotApplicable(
            f"the checkpoint has no parameter {e} that the '{run.scheme}' model at length "
            f"{length} needs") from None
    methods.check_shapes(abstract, params, run.scheme, length,
                         int(run.config.model.max_length))
    record["details"] = cell.details
    treedef = jax.tree.structure(abs_params)
    # Cells whose eval config is the same (the four table methods at one length, the
    # checkpoints of one continued run) share one jitted scorer, hence one compile.
    memo = (_model_key(cell.config), str(treedef))
    if memo not in _SCORERS:
        _SCORERS.clear()  # keep one: a scorer holds its compiled executables
        _SCORERS[memo] = metrics.make_scorer(graphdef, treedef, cell.config)
    return cell, params, _SCORERS[memo]


def score_batches(scorer, params, inputs: dict, acc: metrics.Accumulator,
                  per_batch: int) -> Optional[float]:
    """Every row of `inputs` through the scorer into `acc`; returns the first batch's seconds
    (compile + one batch), None when there was no row."""
    t0 = time.perf_counter()
    compile_s = None
    for part, real in batches_lib.batches(inputs, per_batch):
        out = jax.device_get(scorer(params, part))
        if compile_s is None:
            compile_s = time.perf_counter() - t0
        acc.add(*out, rows=real)
    return compile_s


def evaluate_cell(run: Run, variant: methods.Variant, length: int,
                  settings: batches_lib.Settings, options: methods.Options) -> dict:
    """One cell -> its record (status 'ok' with metrics, or 'not_applicable' with a reason)."""
    record = _base_record(run, variant, length, settings)
    try:
        cell, params, scorer = prepare_cell(run, variant, length, record, options)
    except methods.NotApplicable as e:
        return dict(record, status="not_applicable", reason=str(e))
    causal = record["causal"]
    base = batches_lib.rows(run, length, settings)
    inputs = batches_lib.for_method(base.arrays, cell.window, causal,
                                    shuffle_seed=settings.seed if variant.shuffle else None)
    acc = metrics.Accumulator(metrics.bucket_edges(run.trained_length, length))
    per_batch = batches_lib.rows_per_batch(length, len(base.cluster), settings)
    t0 = time.perf_counter()
    compile_s = score_batches(scorer, params, inputs, acc, per_batch)
    record.update(acc.summary(causal))
    record["rows"] = dict(acc.rows(), cluster=base.cluster.tolist())
    summary = intervals.summarize(record["rows"], seed_of_run=seeds_lib.config_seed(run.config),
                                  seed=settings.seed)
    record["overall"].update(
        {k: v for k, v in summary.items() if k.endswith(("_lo", "_hi")) or k in (
            "rows", "clusters", "resampled", "interval", "accuracy_interval", "loss_interval",
            "n_seeds", "seeds")})
    record.update({k: summary[k] for k in ("n_seeds", "seeds", "interval")})
    record["crossing_rows"] = base.crossing
    record.update(status="ok", wall_s=time.perf_counter() - t0, first_batch_s=compile_s,
                  rows_per_batch=per_batch)
    return record


PROBE_FAR = 4  # the longest length is probed too when it is at least this many times the first


def probe(cells: list[tuple], settings: batches_lib.Settings,
          options: methods.Options) -> dict[int, float]:
    """{length: estimated seconds of one whole cell} from a short timed run of the first cell
    of `cells` and, when it is at least PROBE_FAR times longer, of the longest: each builds its
    scorer (the compile the first cell then reuses) and scores two batches; the cell's estimate
    is the first batch's time (with the build and compile) plus the second's for each batch
    after it. Nothing is recorded; a cell that is not applicable is skipped."""
    if not cells:
        return {}
    longest = max(cells, key=lambda c: c[2])
    picks = [longest] if longest[2] >= PROBE_FAR * cells[0][2] else []
    estimates = {}
    for run, variant, length in picks + [cells[0]]:  # the first cell last: its scorer is kept
        t0 = time.perf_counter()
        record = _base_record(run, variant, length, settings)
        try:
            cell, params, scorer = prepare_cell(run, variant, length, record, options)
        except methods.NotApplicable:
            continue
        base = batches_lib.rows(run, length, settings)
        inputs = batches_lib.for_method(base.arrays, cell.window, record["causal"])
        per_batch = batches_lib.rows_per_batch(length, len(base.cluster), settings)
        count = -(-len(base.cluster) // per_batch)
        seconds = []
        for part, _ in batches_lib.batches(inputs, per_batch):
            jax.device_get(scorer(params, part))
            seconds.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            if len(seconds) == 2:
                break
        estimates[int(length)] = seconds[0] + (count - 1) * seconds[-1]
    return estimates


def plan(runs: list[Run], lengths: list[int],
         run_variants: dict[str, list[methods.Variant]], *, reliance: bool = True) -> list[tuple]:
    """Ordered cells: per run, lengths outer, variants inner; with `reliance`, first the
    as_is cells at the training length with intact and with shuffled positions."""
    cells, seen = [], set()
    for run in runs:
        todo = [(v, n) for n in lengths for v in run_variants[run.key]]
        if reliance:
            todo = [(methods.Variant("as_is"), run.trained_length),
                    (methods.Variant("as_is", shuffle=True), run.trained_length), *todo]
        for variant, length in todo:
            if (run.key, variant, length) not in seen:
                seen.add((run.key, variant, length))
                cells.append((run, variant, length))
    return cells


def record_runs(results: dict, runs: list[Run], out_dir: str) -> dict:
    """Each run's entry in results['runs'], with the digest of its weights; {run.key: its key
    there}. Refuses (ConfigError, before anything is evaluated) a run whose key results.json
    already holds with another digest: its finished cells came from other weights, and reusing
    them would mix two models in one table. An entry without a digest (a results.json from
    before digests) takes this run's."""
    keys = {run.key: report.run_key(run, out_dir) for run in runs}
    for run in runs:
        entry = dict(report.run_entry(run, out_dir), weights=weights_digest(run))
        earlier = (results["runs"][keys[run.key]].get("weights")
                   if keys[run.key] in results["runs"] else None)
        if earlier is not None and earlier != entry["weights"]:
            raise ConfigError(
                "out", out_dir, f"a results folder whose {keys[run.key]} cells came from the "
                f"weights there now (results.json has sha256 {earlier[:12]}, the checkpoint "
                f"{entry['weights'][:12]}: retrained or replaced); move it away or choose "
                "another --out")
        results["runs"][keys[run.key]] = entry
    return keys


def applicable(run: Run, variant: methods.Variant, length: int,
               options: methods.Options) -> bool:
    """Whether the cell can be scored as far as its config says (the plan's count; a
    checkpoint whose shapes do not fit is found when the cell runs)."""
    try:
        methods.make_cell(run, variant, length, options)
    except methods.NotApplicable:
        return False
    return True


def run_sweep(runs: list[Run], lengths: list[int], run_variants: dict[str, list[methods.Variant]],
              settings: batches_lib.Settings, options: methods.Options, out_dir: str, *,
              meta: dict, progress: Optional[bool] = None, reliance: bool = True,
              extra: Optional[dict] = None, reuse: Optional[Reuse] = None) -> dict:
    """Evaluate every cell not already in out_dir/results.json, nor found by `reuse` (cells
    of the same weights scored elsewhere: posjax.evaluation.run.reuse); returns the results
    dict. `extra`: {run.key: fields added to that run's records} (the recovery curve's tags).
    Prints the plan first (posjax.evaluation.run.eta), then one line per scored cell with the
    time left."""
    results = report.load_or_new(out_dir, meta)
    keys = record_runs(results, runs, out_dir)
    cells = plan(runs, lengths, run_variants, reliance=reliance)
    todo = [c for c in cells
            if cell_key(keys[c[0].key], c[1], c[2], settings) not in results["cells"]]
    here = len(cells) - len(todo)

    def identity(run, variant, length):  # (weights, step, the cell key past its run)
        key = cell_key(keys[run.key], variant, length, settings)
        return results["runs"][keys[run.key]].get("weights"), run.step, key.partition("|")[2]

    reused = []
    for c in todo if reuse is not None else []:
        found = reuse.find(*identity(*c))
        if found is not None:
            run = c[0]
            found.update(run=run.name, workdir=results_file.relative_workdir(run.workdir, out_dir),
                         **(extra or {}).get(run.key, {}))
            results["cells"][cell_key(keys[run.key], c[1], c[2], settings)] = found
            reused.append(c)
    if reused:
        report.write_cells(out_dir, results)
        todo = [c for c in todo if c not in reused]
    fits = {id(c): applicable(*c, options) for c in todo}
    clock = eta.Clock([(c[0].scheme, c[2]) for c in todo if fits[id(c)]],
                      eta.timings(results["cells"].values()))
    if clock.seconds_left() is None:
        clock.probed = probe([c for c in todo if fits[id(c)]], settings, options)
    sources = sorted({results["cells"][cell_key(keys[c[0].key], c[1], c[2], settings)]
                      ["reused"]["from"] for c in reused})
    tqdm.write(eta.plan_line(len(cells), sum(fits.values()), here, len(reused), sources,
                             len(todo) - sum(fits.values()), clock, out_dir))
    bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc="eval", dynamic_ncols=True,
               disable=progress is False)
    def redraw():
        report.write_tables(out_dir, results)
        plots.write_plots(out_dir, results)

    figures = plots.Redrawer(redraw)
    try:
        for c in todo:
            run, variant, length = c
            bar.set_postfix_str(f"{run.name} {variant.label} L={length}")
            t0 = time.perf_counter()
            record = evaluate_cell(run, variant, length, settings, options)
            record["workdir"] = results_file.relative_workdir(run.workdir, out_dir)
            record.update((extra or {}).get(run.key, {}))
            if record["status"] == "ok":
                record["cell_s"] = time.perf_counter() - t0
                if reuse is not None:
                    reuse.store(*identity(run, variant, length), record)
            results["cells"][cell_key(keys[run.key], variant, length, settings)] = record
            report.write_cells(out_dir, results)
            figures.after_cell()
            bar.update(1)
            if fits[id(c)]:
                clock.finished(length, record.get("cell_s"), run.scheme)
            if record["status"] == "ok":
                o = record["overall"]
                tqdm.write(f"{run.name:>16} L={length:<6} {variant.label:<28} acc {o['accuracy']:.4f}"
                           f" [{o['accuracy_lo']:.4f}, {o['accuracy_hi']:.4f}]  loss "
                           f"{o['loss']:.4f}  ({record['cell_s']:.1f}s; {clock.progress()})")
    finally:  # a stopped sweep leaves the tables and figures of every cell it finished
        bar.close()
        figures.now()
    return results
