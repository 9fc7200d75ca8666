"""What eval.py does, as a function of a plain Request (so tests can call it without flags).

  1. checks every input (lengths, methods, baseline, alphas, workdirs, the old results in
     `out`) -> ConfigError before any compile; every length must fit the held-out stream of
     every run (posjax.data.heldout), checked before anything is built or written; runs
     trained on different corpora or tokenizers are refused in one `out` unless
     allow_mixed_corpora (posjax.evaluation.run.corpora_check)
  2. experiment configs (configs/experiments/*.py): trains each listed run whose workdir has no
     finished checkpoint yet (posjax.training.train_and_evaluate)
  3. the sweep (posjax.evaluation.run.sweep) over every run, writing results into `out`, with each
     run's position reliance and paired differences; runs that differ only in their training
     seed are averaged as one group (posjax.evaluation.derive.seeds; `groups` names them by hand)
  4. the recovery curve (recovery_steps): continued training per method at continue_length
     (posjax.evaluation.run.recovery)
Runs trained on the algorithmic tasks (data.corpus='algorithmic', configs/algorithmic.py)
take their own sweep instead of 3-4: each task's test sequences at every length, the
reference's masked accuracy (posjax.evaluation.run.algorithmic; `sequences`, `test_dropout`,
`test_positions`).

One process writes `out` at a time (posjax.writer_lock, held from step 1 to the end), and
each workdir it trains (train_and_evaluate holds those).

Python API (what eval.py calls): `run(Request(out=..., workdirs=[...], lengths=[...],
methods=[...]))` -> the results dict (also in out/results.json). Pieces for other callers:
posjax.evaluation.run.sweep.run_sweep (lengths x methods), derive.derive (reliance, differences),
recovery.run_recovery (the curve), intervals (the intervals), seeds (the seed groups).
"""

from __future__ import annotations

import time
from typing import Optional

from posjax import memory, schema, storage, training, writer_lock
from posjax.data import heldout, patches
from posjax.errors import ConfigError, check
from posjax.evaluation.run import batches as batches_lib
from posjax.evaluation.run import continued, corpora_check, options, recovery, restore, reuse, sweep
from posjax.evaluation import methods
from posjax.evaluation.report import report
from posjax.evaluation.results import results_file
from posjax.evaluation.run.algorithmic import scoring as algorithmic_scoring
from posjax.evaluation.run.algorithmic import sweep as algorithmic_sweep
from posjax.evaluation.run.tasks import sweep as task_sweep
from posjax.training import checkpoints

DEFAULT_MAX_LENGTH = 8192
Request = options.Request  # every field is declared in posjax.evaluation.run.options


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _all_algorithmic(r: Request) -> bool:
    """Whether every run of the request is an algorithmic-task run (lengths are then input
    lengths of the task, from 1). A workdir whose config cannot be read is left to the
    checks that open it."""
    configs = list(r.experiment.runs.values()) if r.experiment is not None else []
    for w in r.workdirs:
        try:
            configs.append(restore.read_config(w))
        except (ConfigError, OSError):
            return False
    return bool(configs) and all(algorithmic_scoring.is_algorithmic(c) for c in configs)


def check_request(r: Request) -> None:
    options.check_fields(r)
    options.check_experiment(r.experiment)
    algorithmic = _all_algorithmic(r)
    if r.lengths is not None and algorithmic:
        algorithmic_scoring.check_lengths(r.lengths)
    elif r.lengths is not None:
        check(len(r.lengths) > 0, "lengths", r.lengths, "a non-empty list of ints >= 3")
        for n in r.lengths:
            check(_is_int(n) and n >= 3, "lengths", n,
                  "ints >= 3 (a row is [CLS] tokens [SEP]); e.g. 512,1024,2048")
    if r.methods is not None:
        r.methods = methods.check_methods(list(r.methods))
    if r.baseline is not None:
        b = methods.canonical(r.baseline)
        check(b in methods.METHODS, "baseline", r.baseline, f"one of {', '.join(methods.METHODS)}")
        check(r.methods is None or b in r.methods, "baseline", r.baseline,
              f"one of the evaluated --methods ({', '.join(r.methods or [])})")
        r.baseline = b
    heldout.check_cluster_tokens(r.cluster_tokens)
    if r.continue_steps and r.recovery_steps is None:
        r.recovery_steps = [0, r.continue_steps]
    if r.recovery_steps is not None:
        r.recovery_steps = recovery.check_steps(list(r.recovery_steps))
        check(_is_int(r.continue_length) and r.continue_length >= 3, "continue_length",
              r.continue_length, "the length to continue training at (an int >= 3)")
        r.recovery_methods = methods.check_methods(list(r.recovery_methods or ["hierarchical"]),
                                                   field="recovery_methods")
        r.continue_seeds = recovery.check_seeds(r.continue_seeds)
        continued.check_options(schedule=r.continue_schedule, batch_size=r.continue_batch_size)
    if r.tasks is not None:
        r.tasks = list(task_sweep.check(task_sweep.TaskSettings(
            tuple(r.tasks), r.task_rows, r.task_digits)).tasks)
    algorithmic_scoring.check_settings(algorithmic_settings(r))
    if algorithmic:  # before anything is trained
        check_algorithmic(r)
    check(bool(r.workdirs) or r.experiment is not None, "workdir", None,
          "at least one --workdir (a training workdir) or an experiment --config")
    for folder in r.reuse or []:
        check(storage.exists(storage.join(folder, results_file.RESULTS)), "reuse", folder,
              f"results folders holding {results_file.RESULTS} (written by eval.py --out)")


def algorithmic_settings(r: Request) -> algorithmic_scoring.Settings:
    return algorithmic_scoring.Settings(sequences=r.sequences, seed=r.seed,
                                        dropout=r.test_dropout, positions=r.test_positions,
                                        batch_tokens=r.batch_tokens)


def check_corpus(name: str, config, corpus: Optional[str]) -> None:
    """ConfigError on --corpus when it would feed a run the other kind of data: an image run
    (data.corpus='patches') reads its images, a text run reads text."""
    if not corpus:
        return
    if patches.is_patches(config) and corpus != "patches":
        raise ConfigError("corpus", corpus, f"unset or 'patches' for {name}: it reads image "
                          "patches (data.corpus='patches'), not text")
    if not patches.is_patches(config) and corpus == "patches":
        raise ConfigError("corpus", corpus, f"a text corpus for {name}: it reads text "
                          f"(data.corpus={schema.view(config).data.corpus!r}), not image patches")


def earlier_runs(out: str) -> dict:
    """{run name: config} of the runs already in out/results.json (they share its tables)."""
    results = report.check_out(out)
    return {} if results is None else {e["name"]: e["config"]
                                       for e in results["runs"].values()}


def seed_groups(groups: Optional[dict], named: list, runs: list, out: str) -> dict:
    """--group NAME=W1,W2 as {NAME: [run keys]}: W a --workdir as given or an experiment
    run's name (run() checked that every member is one)."""
    if not groups:
        return {}
    keys = {}
    for (name, workdir), run in zip(named, runs):
        key = report.run_key(run, out)
        keys[workdir] = keys[run.workdir] = keys[run.name] = key
        if name:
            keys[name] = key
    return {group: [keys[m] for m in members] for group, members in groups.items()}


def default_lengths(runs: list[restore.Run]) -> list[int]:
    out = set()
    for run in runs:
        n = run.trained_length
        # image runs (data.corpus='patches'): the grid side doubles, so lengths go by 4x
        grow = 4 if patches.is_patches(run.config) else 2
        while n <= DEFAULT_MAX_LENGTH:
            out.add(n)
            n *= grow
        out.add(min(run.trained_length, DEFAULT_MAX_LENGTH))
    return sorted(out)


def variants_of(run: restore.Run, r: Request) -> list[methods.Variant]:
    """The method variants `r` asks of `run` (its scheme's defaults when r.methods is None)."""
    fitting = list(r.methods or methods.default_methods(run.scheme))
    trained_logn = schema.view(run.config).model.logn_length is not None
    return methods.variants(fitting, run.scheme, alphas=list(r.alphas), logn=r.logn,
                            trained_logn=trained_logn)


def finished_without_workdir(r: Request, settings: batches_lib.Settings) -> list[str]:
    """Names of the experiment's runs whose workdir has no checkpoint (gone with the machine
    that trained them) while r.out/results.json already holds every cell this request plans
    for them: they are neither retrained nor opened, and their cells stay as they are. A
    retrained run would be other weights (no bit-for-bit training across CPUs), so the cells
    an earlier session committed are the run. Only where the experiment runs run_by_run."""
    if r.experiment is None or not run_by_run(r):
        return []
    results = report.check_out(r.out)
    if results is None:
        return []
    done = []
    for name, cfg in r.experiment.runs.items():
        workdir = storage.join(storage.join(r.experiment.workdir_root, name))
        if checkpoints.latest_step(workdir) is not None:
            continue
        rel = results_file.relative_workdir(workdir, r.out)
        entries = [e for e in results["runs"].values() if e["workdir"] == rel]
        if len(entries) != 1:
            continue
        run = restore.Run(name, workdir, int(entries[0]["step"]), cfg, tokenizer=None)
        if algorithmic_scoring.is_algorithmic(cfg):
            held = results_file.section(results, algorithmic_sweep.SECTION)
            if all(k in held for k in algorithmic_sweep.planned_keys(
                    report.run_key(run, r.out), r.lengths, algorithmic_settings(r))):
                done.append(name)
            continue
        cells = sweep.plan([run], sorted(set(r.lengths)), {run.key: variants_of(run, r)},
                           reliance=r.reliance)
        key = report.run_key(run, r.out)
        if all(sweep.cell_key(key, v, n, settings) in results["cells"] for _, v, n in cells):
            done.append(name)
    return done


def training_order(runs) -> list[str]:
    """The experiment's run names, seed 0 of every run first, then seed 1, ...: a grid that
    its machine cuts short has every comparison at one seed before any at three."""
    return sorted(runs, key=lambda name: (int(runs[name].seed), name))


def train_experiment_runs(exp, progress, names=None) -> list[tuple[str, str]]:
    """(name, workdir) of the experiment's runs `names` (default: all), training the
    unfinished."""
    out = []
    for name in training_order(exp.runs):
        cfg = exp.runs[name]
        if names is not None and name not in names:
            continue
        workdir = storage.join(exp.workdir_root, name)
        step = checkpoints.latest_step(workdir)
        if step is None or step < int(cfg.train.steps):
            t0 = time.perf_counter()
            print(f"eval: training {name} in {workdir} ({cfg.train.steps} steps)", flush=True)
            continued.finished(training.train_and_evaluate(cfg, workdir, progress_bar=progress),
                               workdir)
            print(f"eval: trained {name} in {time.perf_counter() - t0:.0f}s", flush=True)
        out.append((name, workdir))
    return out


def check_memory(runs: list, lengths: list, batch_tokens: int, *,
                 available: Optional[int] = None) -> None:
    """ConfigError on --lengths when scoring a batch at a length would not fit this machine's
    free memory (posjax.memory's estimate). A batch holds max(L, batch_tokens) tokens: rows
    of L tokens, as many as fit batch_tokens, at least one."""
    for run in runs:
        model = run.config.model
        for n in lengths:
            memory.check_fits("lengths", n, lambda m: memory.estimate_bytes(
                model, batch=1, length=max(int(m), int(batch_tokens))), available=available)


def run(r: Request) -> dict:
    """Everything eval.py does; returns the results dict (also written to r.out). Another
    live process writing r.out is a ConfigError naming it (posjax.writer_lock): two sweeps
    into one results.json would each rewrite it from their own older read."""
    check_request(r)
    with writer_lock.hold(r.out, field="out"):
        return _run(r)


def _run(r: Request) -> dict:
    report.check_out(r.out)
    named: list[tuple[Optional[str], str]] = [(None, w) for w in r.workdirs]
    trained_on = {}  # run name -> training config: one corpus per table
    for w in r.workdirs:  # fail on a missing workdir before any training
        opened = restore.open_run(w)
        check_corpus(opened.name, opened.config, r.corpus)
        trained_on[opened.name] = opened.config
    if r.experiment is not None:
        for name, cfg in r.experiment.runs.items():
            check_corpus(name, cfg, r.corpus)
            trained_on[name] = cfg
    for group, members in (r.groups or {}).items():
        for m in members:
            check(m in r.workdirs or m in trained_on, "group", f"{group}={','.join(members)}",
                  "members among the --workdir paths as given or the experiment's run names")
    trained_on.update(earlier_runs(r.out))
    mixed = corpora_check.check_one_corpus(trained_on, r.allow_mixed_corpora)
    settings = batches_lib.Settings(masked_tokens=r.masked_tokens, seed=r.seed,
                                    batch_tokens=r.batch_tokens, corpus=r.corpus,
                                    data_path=r.data_path, max_documents=r.max_documents,
                                    cluster_tokens=r.cluster_tokens)
    done = finished_without_workdir(r, settings)
    if r.experiment is None:
        return _score(r, named, done, settings, mixed)
    if done:
        print(f"eval: {len(done)} runs finished in {r.out}/{results_file.RESULTS} without their "
              f"workdirs, kept as they are (not retrained): {', '.join(done)}", flush=True)
    if not run_by_run(r):  # every run at once (done is empty: see finished_without_workdir)
        return _score(r, named + train_experiment_runs(r.experiment, r.progress), done,
                      settings, mixed)
    # One run at a time: train it, score it, then the next, so that every finished run is in
    # results.json before the next trains (a study longer than a machine's lifetime resumes
    # from results.json: finished_without_workdir).
    results = None
    for name in training_order(r.experiment.runs):
        if name not in done:
            one = train_experiment_runs(r.experiment, r.progress, names={name})
            results = _score(r, named + one, done, settings, mixed)
    return results if results is not None else _score(r, named, done, settings, mixed)


def check_algorithmic(r: Request) -> None:
    """ConfigError on the options that algorithmic-task runs do not take."""
    for field, given in (("methods", r.methods), ("tasks", r.tasks),
                         ("recovery_steps", r.recovery_steps), ("corpus", r.corpus),
                         ("baseline", r.baseline)):
        check(not given, field, given, "unset for algorithmic-task runs (scored on their "
              "tasks' test sequences, as the reference does)")


def _score_algorithmic(r: Request, runs: list, kinds: set, mixed: bool) -> dict:
    """The algorithmic sweep (posjax.evaluation.run.algorithmic) over `runs`."""
    if len(kinds) > 1:
        raise ConfigError("workdir", ", ".join(run.name for run in runs),
                          "runs of one kind: algorithmic-task runs (data.corpus='algorithmic') "
                          "are scored on their tasks, not together with text or image runs")
    check_algorithmic(r)
    lengths = r.lengths if r.lengths is not None else algorithmic_scoring.default_lengths(
        max(algorithmic_scoring.max_input_length(run.config) for run in runs))
    settings = algorithmic_settings(r)
    meta = options.recorded(
        r, "algorithmic", lengths=algorithmic_scoring.check_lengths(lengths),
        bucket=settings.bucket, experiment=experiment_name(r), mixed_corpora=mixed,
        baseline=None)
    return algorithmic_sweep.run_algorithmic(runs, lengths, settings, r.out, meta=meta,
                                             progress=r.progress)


def experiment_name(r: Request) -> Optional[str]:
    return r.experiment.get("name") if r.experiment is not None else None


def run_by_run(r: Request) -> bool:
    """Whether an experiment is trained and scored one run at a time: a plain sweep at given
    lengths (tasks, recovery curves and named groups need every run at once)."""
    return (r.lengths is not None and not r.tasks and r.recovery_steps is None
            and not r.groups)


def _score(r: Request, named: list, done: list, settings: batches_lib.Settings,
           mixed: bool) -> dict:
    """The sweep (or task cells, then recovery curves) over the trained runs `named`, after
    their checks; `done`: the experiment's runs kept from results.json."""
    labels = restore.unique_names([w for _, w in named])
    runs = [restore.open_run(w, name or label) for (name, w), label in zip(named, labels)]
    kinds = {algorithmic_scoring.is_algorithmic(run.config) for run in runs}
    if True in kinds:
        return _score_algorithmic(r, runs, kinds, mixed)

    if r.tasks:  # retrieval tasks and long documents are text
        for run in runs:
            check(not patches.is_patches(run.config), "tasks", ",".join(r.tasks),
                  f"unset for {run.name}: it reads image patches (data.corpus='patches')")
    requested = r.methods
    if requested is not None:  # every run of the experiment counts, trained or not
        opened = {run.name for run in runs}
        schemes = [(run.name, run.scheme) for run in runs] + [
            (name, str(cfg.position.name)) for name, cfg in
            (r.experiment.runs.items() if r.experiment is not None else ()) if name not in opened]
        for m in requested:
            if not any(methods.applies(m, scheme) for _, scheme in schemes):
                raise ConfigError("methods", m, "a method that fits at least one model: " + "; ".join(
                    f"{name} ({scheme}) takes {', '.join(methods.fitting(scheme))}"
                    for name, scheme in schemes))

    lengths = sorted(set(r.lengths)) if r.lengths is not None else default_lengths(runs)
    sources, recovery_variants = [], []
    if r.recovery_steps is not None:
        recovery_variants = [methods.Variant(m, alpha=r.continue_alpha if m == "hierarchical"
                                             else None) for m in r.recovery_methods]
        sources = [run for run in runs
                   if all(methods.applies(v.method, run.scheme) for v in recovery_variants)]
        if not sources:
            raise ConfigError("recovery_methods", ",".join(r.recovery_methods),
                              "methods that fit at least one evaluated model (the table "
                              "methods and hierarchical need a learned table)")
        for src in sources:
            recovery.check(src, recovery_variants, r.continue_length, r.recovery_steps,
                           seeds=r.continue_seeds, schedule=r.continue_schedule,
                           batch_size=r.continue_batch_size)
    streams = [batches_lib.stream(run, settings) for run in runs]
    if r.lengths is None:  # default lengths: only those every held-out stream can fill
        texts = [s for s in streams if s is not None]  # None: an image run (any grid)
        fits = [n for n in lengths if all(n - 2 <= s.size for s in texts)]
        if len(fits) < len(lengths):
            print(f"eval: lengths {sorted(set(lengths) - set(fits))} skipped: longer than a "
                  f"held-out stream ({min(s.size for s in texts)} tokens)", flush=True)
        lengths = fits or [min(lengths)]
    for run, stream in zip(runs, streams):  # every length fills every run's held-out stream
        for n in lengths + ([r.continue_length] if sources else []):
            batches_lib.check_length(run, stream, n, settings)
    check_memory(runs, lengths, r.batch_tokens)

    run_variants = {run.key: variants_of(run, r) for run in runs}
    shaping = methods.Options(rope_factor=r.rope_factor, rerope_window=r.rerope_window,
                              leaky_factor=r.leaky_factor)
    meta = options.recorded(r, "text", lengths=lengths, experiment=experiment_name(r),
                            mixed_corpora=mixed,
                            groups=seed_groups(r.groups, named, runs, r.out))
    if r.tasks:  # the task cells (posjax.evaluation.run.tasks) instead of the MLM sweep
        meta.update(options.recorded(r, "tasks"))
        return task_sweep.run_tasks(
            runs, lengths, run_variants,
            task_sweep.TaskSettings(tuple(r.tasks), r.task_rows, r.task_digits), settings,
            shaping, r.out, meta=meta, progress=r.progress)
    found = (reuse.Reuse(list(r.reuse or []), reuse.cache_dir() if r.cell_cache else None,
                         meta) if r.reuse or r.cell_cache else None)
    results = sweep.run_sweep(runs, lengths, run_variants, settings, shaping, r.out, meta=meta,
                              progress=r.progress, reliance=r.reliance, reuse=found)
    if sources:
        root = (r.experiment.workdir_root if r.experiment is not None
                else storage.join(r.out, "continued"))
        for src in sources:
            results = recovery.run_recovery(src, recovery_variants, r.continue_length,
                                            r.recovery_steps, settings, r.out, root=root,
                                            options=shaping, meta=meta, progress=r.progress,
                                            seeds=r.continue_seeds,
                                            schedule=r.continue_schedule,
                                            batch_size=r.continue_batch_size)
    return results
