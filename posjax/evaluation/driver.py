"""What eval.py does, as a function of a plain Request (so tests can call it without flags).

  1. checks every input (lengths, methods, alphas, workdirs) -> ConfigError before any compile
  2. experiment configs (configs/experiments/*.py): trains each listed run whose workdir has no
     finished checkpoint yet (posjax.training.train_and_evaluate)
  3. continued training (continue_steps > 0): learned-table runs -> new hierarchical workdirs
  4. the sweep (posjax.evaluation.sweep) over every run, writing results into `out`
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Optional

from posjax.errors import ConfigError, check
from posjax.evaluation import batches as batches_lib
from posjax.evaluation import methods, restore, sweep

DEFAULT_ALPHAS = (0.2, 0.3, 0.4, 0.45)
DEFAULT_MAX_LENGTH = 8192


@dataclasses.dataclass
class Request:
    out: str
    workdirs: list = dataclasses.field(default_factory=list)
    lengths: Optional[list] = None  # None = T, 2T, ... up to 8192 (per the runs' T)
    methods: Optional[list] = None  # None = the defaults of each run's scheme
    alphas: tuple = DEFAULT_ALPHAS
    logn: bool = False
    num_docs: int = 8
    min_tokens: int = 0
    seed: int = 0
    batch_tokens: int = 16384
    rope_factor: Optional[float] = None
    rerope_window: Optional[int] = None
    leaky_factor: Optional[float] = None
    corpus: Optional[str] = None
    data_path: Optional[str] = None
    max_documents: Optional[int] = None
    continue_steps: int = 0
    continue_length: int = 0
    continue_alpha: float = 0.4
    continue_methods: Optional[list] = None
    experiment: Any = None  # an experiment ConfigDict (configs/experiments/*.py)
    progress: Optional[bool] = None


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_request(r: Request) -> None:
    check(bool(r.out), "out", r.out, "an output directory")
    if r.lengths is not None:
        check(len(r.lengths) > 0, "lengths", r.lengths, "a non-empty list of ints >= 3")
        for n in r.lengths:
            check(_is_int(n) and n >= 3, "lengths", n,
                  "ints >= 3 (a row is [CLS] tokens [SEP]); e.g. 512,1024,2048")
    if r.methods is not None:
        r.methods = methods.check_methods(list(r.methods))
    for a in r.alphas:
        check(isinstance(a, (int, float)) and 0 < a < 1 and a != 0.5, "alphas", a,
              "numbers in (0, 1) other than 0.5 (hierarchical alpha)")
    check(_is_int(r.num_docs) and r.num_docs >= 1, "num_docs", r.num_docs, "a positive int")
    check(_is_int(r.min_tokens) and r.min_tokens >= 0, "min_tokens", r.min_tokens,
          "an int >= 0 (rows per length = max(num_docs, min_tokens // length))")
    check(_is_int(r.batch_tokens) and r.batch_tokens >= 1, "batch_tokens", r.batch_tokens,
          "a positive int (tokens per evaluation batch)")
    check(r.rope_factor is None or r.rope_factor >= 1, "rope_factor", r.rope_factor,
          "unset (= max(1, L/T) per length) or a number >= 1")
    check(r.rerope_window is None or (_is_int(r.rerope_window) and r.rerope_window >= 1),
          "rerope_window", r.rerope_window, "unset (= T//2) or an int >= 1")
    check(r.leaky_factor is None or r.leaky_factor > 1, "leaky_factor", r.leaky_factor,
          "unset (auto) or a number > 1")
    check(_is_int(r.continue_steps) and r.continue_steps >= 0, "continue_steps", r.continue_steps,
          "an int >= 0 (0 = no continued training)")
    if r.continue_steps:
        check(_is_int(r.continue_length) and r.continue_length >= 3, "continue_length",
              r.continue_length, "the length to continue training at (an int >= 3)")
    check(bool(r.workdirs) or r.experiment is not None, "workdir", None,
          "at least one --workdir (a training workdir) or an experiment --config")


def default_lengths(runs: list[restore.Run]) -> list[int]:
    out = set()
    for run in runs:
        n = run.trained_length
        while n <= DEFAULT_MAX_LENGTH:
            out.add(n)
            n *= 2
        out.add(min(run.trained_length, DEFAULT_MAX_LENGTH))
    return sorted(out)


def train_experiment_runs(exp, progress) -> list[tuple[str, str]]:
    """(name, workdir) of every run of the experiment, training the unfinished ones."""
    from posjax.training import checkpoints, train_and_evaluate

    out = []
    for name, cfg in exp.runs.items():
        workdir = os.path.abspath(os.path.join(exp.workdir_root, name))
        step = checkpoints.latest_step(workdir)
        if step is None or step < int(cfg.train.steps):
            t0 = time.perf_counter()
            print(f"eval: training {name} in {workdir} ({cfg.train.steps} steps)", flush=True)
            train_and_evaluate(cfg, workdir, progress_bar=progress)
            print(f"eval: trained {name} in {time.perf_counter() - t0:.0f}s", flush=True)
        out.append((name, workdir))
    return out


def run(r: Request) -> dict:
    """Everything eval.py does; returns the results dict (also written to r.out)."""
    check_request(r)
    named: list[tuple[Optional[str], str]] = [(None, w) for w in r.workdirs]
    for w in r.workdirs:  # fail on a missing workdir before any training
        restore.open_run(w)
    if r.experiment is not None:
        named += train_experiment_runs(r.experiment, r.progress)
    labels = restore.unique_names([w for _, w in named])
    runs = [restore.open_run(w, name or label) for (name, w), label in zip(named, labels)]

    run_methods: dict[str, list[str]] = {}
    requested = r.methods
    if requested is not None:
        for m in requested:
            if not any(methods.applies(m, run.scheme) for run in runs):
                raise ConfigError("methods", m, "a method that fits at least one model: " + "; ".join(
                    f"{run.name} ({run.scheme}) takes {', '.join(methods.fitting(run.scheme))}"
                    for run in runs))
    for run in runs:
        run_methods[run.key] = list(requested or methods.default_methods(run.scheme))

    if r.continue_steps:
        from posjax.evaluation import continued

        sources = [run for run in runs if run.scheme in methods.LEARNED]
        if not sources:
            raise ConfigError("continue_steps", r.continue_steps,
                              "0 unless a learned-table model is evaluated (continued training "
                              "extends a learned table with 'hierarchical')")
        root = (r.experiment.workdir_root if r.experiment is not None
                else os.path.join(r.out, "continued"))
        for src in sources:
            continued.continued_config(src, r.continue_length, r.continue_steps, r.continue_alpha)
        for src in sources:
            name = f"{src.name}_hier{r.continue_length}"
            workdir = os.path.abspath(os.path.join(root, name))
            t0 = time.perf_counter()
            print(f"eval: continued training {src.name} -> {workdir} "
                  f"({r.continue_steps} steps at {r.continue_length})", flush=True)
            continued.continue_training(src, r.continue_length, r.continue_steps,
                                        r.continue_alpha, workdir, progress_bar=r.progress)
            print(f"eval: continued training done in {time.perf_counter() - t0:.0f}s", flush=True)
            new = restore.open_run(workdir, name)
            runs.append(new)
            run_methods[new.key] = list(r.continue_methods or ["as_is"])

    lengths = sorted(set(r.lengths)) if r.lengths is not None else default_lengths(runs)
    run_variants = {}
    for run in runs:
        fitting = run_methods[run.key]
        trained_logn = run.config.model.get("logn_length", None) is not None
        run_variants[run.key] = methods.variants(fitting, run.scheme, alphas=list(r.alphas),
                                                 logn=r.logn, trained_logn=trained_logn)
    options = methods.Options(rope_factor=r.rope_factor, rerope_window=r.rerope_window,
                              leaky_factor=r.leaky_factor)
    settings = batches_lib.Settings(num_docs=r.num_docs, min_tokens=r.min_tokens, seed=r.seed,
                                    batch_tokens=r.batch_tokens,
                                    corpus=r.corpus, data_path=r.data_path,
                                    max_documents=r.max_documents,
                                    cache_dir=os.path.abspath(r.out))
    meta = {"lengths": lengths, "methods": requested, "alphas": list(r.alphas), "logn": r.logn,
            "num_docs": r.num_docs, "min_tokens": r.min_tokens, "seed": r.seed,
            "batch_tokens": r.batch_tokens,
            "rope_factor": r.rope_factor, "rerope_window": r.rerope_window,
            "leaky_factor": r.leaky_factor, "corpus": r.corpus, "data_path": r.data_path,
            "max_documents": r.max_documents, "continue_steps": r.continue_steps,
            "continue_length": r.continue_length, "continue_alpha": r.continue_alpha,
            "experiment": (r.experiment.get("name") if r.experiment is not None else None)}
    return sweep.run_sweep(runs, lengths, run_variants, settings, options, r.out, meta=meta,
                           progress=r.progress)
