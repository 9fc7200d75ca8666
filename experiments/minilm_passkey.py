r"""Does a real pretrained model use context past its table? all-MiniLM-L6-v2 fine-tuned on
`passkey` at 512 tokens, then extended past its 512-row table with hierarchical and the other
table methods, to 2048.

    python -m experiments.minilm_extension --out=results/minilm       # makes --source
    nice -n 10 python -m experiments.minilm_passkey --out=OUT60 \
        --source=results/minilm/workdirs/minilm512
    python -m experiments.minilm_passkey --out=/tmp/pk_smoke --source=... --smoke   # plumbing, minutes

The default --steps is sized for a quarter hour of a 2-core CPU; a longer fine-tune continues
from that one (a fresh optimizer, new training rows), then sweeps again:
    nice -n 10 python -m experiments.minilm_passkey --out=results/minilm_passkey \
        --source=OUT60/workdirs/minilm512_passkey \
        --steps=180 --train_seed=1

Stages (each resumable: rerun the same command after an interruption):
 1. fine-tune: a new workdir OUT/workdirs/minilm<T>_passkey whose step-0 checkpoint holds the
    --source model's params (its trained MLM head included) with a fresh optimizer
    (posjax.evaluation.run.continued.prepare_workdir), its config the source's with
    data.tasks = {'passkey': --fraction} (the rest of the rows stay KJV MLM) and
    data.task_digits = --digits, trained --steps steps at the source's length T;
 2. eval.py's task sweep on that workdir (posjax.evaluation.driver with tasks=['passkey']):
    --rows rows at each of 5 depths per length, every --methods method that applies at each
    length (past T: truncate, hierarchical alpha --alpha, tile, interpolate, stretch,
    new_rows), paired differences from --baseline on the same rows; filler from the
    held-out KJV books. Everything lands in OUT: results.json, tasks.md / tasks.csv, the
    heatmaps (length x depth) and task_passkey_vs_length.png.

Bad input: one line on stderr and exit 2, before anything is written.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from absl import logging as absl_logging

from posjax import schema, startup
from posjax.errors import ConfigError

ALL_METHODS = "as_is,truncate,hierarchical,tile,interpolate,stretch,new_rows"
DEFAULT_SOURCE = os.path.join("results", "minilm", "workdirs", "minilm512")


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--source", default=DEFAULT_SOURCE,
                   help="trained MiniLM workdir (experiments/minilm_extension.py's minilm512)")
    p.add_argument("--source_step", type=int, default=None, help="default: its latest")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the plumbing")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fraction", type=float, default=0.5, help="passkey share of rows")
    p.add_argument("--digits", type=int, default=5)
    p.add_argument("--batch_size", type=int, default=None, help="default: the source's")
    p.add_argument("--learning_rate", type=float, default=None, help="default: the source's")
    p.add_argument("--lengths", default="512,1024,2048")
    p.add_argument("--methods", default=ALL_METHODS)
    p.add_argument("--alpha", type=float, default=0.4, help="hierarchical alpha")
    p.add_argument("--baseline", default="hierarchical")
    p.add_argument("--rows", type=int, default=6, help="rows per depth (5 depths)")
    p.add_argument("--seed", type=int, default=0, help="task rows of the sweep")
    p.add_argument("--train_seed", type=int, default=None,
                   help="training rows (order, mixed-in keys); default --seed. A second "
                        "fine-tune from a fine-tuned --source takes another one to see new rows")
    args = p.parse_args(argv)
    if args.smoke:  # both stages, two steps and one row per depth
        args.steps, args.batch_size, args.rows, args.lengths = 2, 2, 1, "512,1024"
        args.methods = "as_is,truncate,hierarchical,tile"
    for name in ("steps", "digits", "rows"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name}", getattr(args, name), "a positive int")
    if args.batch_size is not None and args.batch_size < 1:
        raise ConfigError("--batch_size", args.batch_size, "a positive int")
    if args.learning_rate is not None and not args.learning_rate > 0:
        raise ConfigError("--learning_rate", args.learning_rate, "a positive number")
    if not 0 < args.fraction <= 1:
        raise ConfigError("--fraction", args.fraction, "a fraction of rows in (0, 1]")
    try:
        args.lengths = [int(n) for n in args.lengths.split(",")]
    except ValueError:
        raise ConfigError("--lengths", args.lengths, "comma-separated ints, e.g. 512,1024,2048") \
            from None
    args.methods = args.methods.split(",")
    if args.baseline not in args.methods:
        raise ConfigError("--baseline", args.baseline,
                          f"one of --methods ({','.join(args.methods)})")
    return args


def open_source(args):
    """The source run (ConfigError if it is not a trained workdir), checked against the task."""
    from posjax.evaluation.run import restore

    if not os.path.isdir(args.source):
        raise ConfigError("--source", args.source, "an existing trained workdir (make one with "
                          "experiments/minilm_extension.py; default " + DEFAULT_SOURCE + ")")
    run = restore.open_run(os.path.abspath(args.source), step=args.source_step)
    if run.scheme != "learned":
        raise ConfigError("--source", args.source, f"a workdir with a learned table (it has "
                          f"position {run.scheme!r})")
    return run


def passkey_config(source_config, args, tokenizer=None):
    """The source config, fine-tuned on passkey rows mixed into its MLM rows (with the
    tokenizer: checked to hold a passkey row at its length)."""
    from posjax.data.tasks import mixing
    from posjax.config.validation import validate

    cfg = source_config.copy_and_resolve_references()
    cfg.data.tasks = {"passkey": float(args.fraction)}
    cfg.data.task_digits = int(args.digits)
    if args.batch_size is not None:
        cfg.data.batch_size = int(args.batch_size)
    t = cfg.train
    if args.learning_rate is not None:
        t.learning_rate = float(args.learning_rate)
    t.steps = int(args.steps)
    t.warmup_steps = max(1, min(int(schema.view(cfg).train.warmup_steps or 0), args.steps // 10))
    t.log_every = max(1, min(10, args.steps))
    t.checkpoint_every = max(1, min(20, args.steps))  # resumable at a 20-step grain
    t.keep_checkpoints = 2
    t.eval_every = 0  # the task sweep is the evaluation
    cfg.seed = int(args.seed if args.train_seed is None else args.train_seed)
    mixing.check(cfg, tokenizer=tokenizer)
    validate(cfg)
    return cfg


def fine_tune(run, args) -> str:
    """Stage 1: OUT/workdirs/minilm<T>_passkey trained to --steps (resumes; no-op when done)."""
    from posjax.convert import store as wd
    from posjax.evaluation.run import continued
    from posjax.evaluation import methods
    from posjax.training import checkpoints, train_and_evaluate

    workdir = os.path.abspath(os.path.join(
        args.out, "workdirs", f"minilm{run.trained_length}_passkey"))
    if checkpoints.latest_step(workdir) is None:
        # as_is at the trained length: the params as they are, a fresh optimizer
        cfg = passkey_config(run.config, args, run.tokenizer)
        continued.prepare_workdir(run, methods.Variant("as_is"), cfg, workdir)
    config = wd.read_config(workdir)
    step = checkpoints.latest_step(workdir) or 0
    if step < int(config.train.steps):
        t0 = time.perf_counter()
        summary = continued.finished(train_and_evaluate(config, workdir), workdir)
        print(f"minilm_passkey: fine-tuned {step} -> {summary['step']} steps in "
              f"{time.perf_counter() - t0:.0f}s", flush=True)
    return workdir


def evaluate(workdir: str, args) -> dict:
    """Stage 2: eval.py's passkey sweep with paired differences from --baseline."""
    from posjax.evaluation import driver

    request = driver.Request(
        out=args.out, workdirs=[workdir], lengths=list(args.lengths), methods=list(args.methods),
        alphas=(args.alpha,), seed=args.seed, baseline=args.baseline, tasks=["passkey"],
        task_rows=args.rows, task_digits=args.digits, masked_tokens=16384,  # < the held-out 16.5k
        batch_tokens=2 * max(args.lengths) if args.smoke else 8192)
    return driver.run(request)


def driver_check(args) -> None:
    """The sweep's own input checks (lengths, methods, baseline, alpha, rows, digits) and the
    out folder, run before the fine-tune so a bad flag costs no training."""
    from posjax.evaluation import driver
    from posjax.evaluation.report import report

    driver.check_request(driver.Request(
        out=args.out, workdirs=[args.source], lengths=list(args.lengths),
        methods=list(args.methods), alphas=(args.alpha,), baseline=args.baseline,
        tasks=["passkey"], task_rows=args.rows, task_digits=args.digits))
    report.check_out(args.out)


def main(argv=None) -> int:
    from posjax.evaluation.run.continued import Stopped

    try:
        args = parse(argv)
        t0 = time.perf_counter()
        run = open_source(args)
        passkey_config(run.config, args, run.tokenizer)  # every check before anything is written
        driver_check(args)
        workdir = fine_tune(run, args)
        t1 = time.perf_counter()
        results = evaluate(workdir, args)
    except ConfigError as e:
        print(f"minilm_passkey: {e}", file=sys.stderr)
        return 2
    except Stopped as e:  # a signal ended the fine-tune; its last checkpoint is saved
        print(f"minilm_passkey: {e}", file=sys.stderr)
        return 1
    n = sum(c["status"] == "ok" for c in results["tasks"].values())  # the task sweep made it
    print(f"minilm_passkey: {n} task cells in {args.out} (fine-tune {t1 - t0:.0f}s, "
          f"sweep {time.perf_counter() - t1:.0f}s)", flush=True)
    return 0


if __name__ == "__main__":
    startup.start()  # before jax allocates: see posjax/startup.py
    absl_logging.set_verbosity(absl_logging.ERROR)  # orbax is chatty at INFO/WARNING (eval.py too)
    sys.exit(main())
