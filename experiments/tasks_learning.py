r"""Does a tiny encoder learn passkey retrieval when it is mixed into training?

    nice -n 10 python -m experiments.tasks_learning \
        --workdir=workdirs/tasks_learning --steps=2000 --fraction=1.0 --digits=2

Trains the 'tiny' model of configs/base.py (hidden 32, 2 layers, People's Daily, dropout 0)
at --length tokens with config.data.tasks = {'passkey': --fraction}, then scores passkey at
that length (posjax.evaluation.run.tasks: --rows per depth, 5 depths) and prints one JSON line:
exact match and per-digit accuracy with 95% intervals next to chance (10^-k and 1/10).
Resumable: the workdir keeps its checkpoints, and a rerun trains only the missing steps.
This is the "learns it above chance" check; it takes minutes, not the seconds a
unit test may, because retrieval appears only after a few hundred steps (the first digit
first). Exit 2 with one line on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from posjax import startup
from posjax.errors import ConfigError


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--fraction", type=float, default=1.0)
    p.add_argument("--digits", type=int, default=2)
    p.add_argument("--length", type=int, default=32)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--position", default="learned")
    p.add_argument("--rows", type=int, default=40, help="rows per depth")
    return p.parse_args(argv)


def config_for(a):
    from posjax.config import defaults
    from posjax.config.validation import validate

    c = defaults.get_config("tiny")
    c.position = defaults.position(a.position)
    c.model.dropout = 0.0
    c.model.max_length = max(int(c.model.max_length), a.length)
    c.data.seq_len, c.data.batch_size = a.length, a.batch_size
    c.data.tasks = {"passkey": a.fraction}
    c.data.task_digits = a.digits
    t = c.train
    t.steps, t.warmup_steps, t.learning_rate = a.steps, 10, 5e-3
    t.log_every, t.eval_every, t.checkpoint_every = 100, 0, max(1, a.steps // 4)
    validate(c)
    return c


def main(argv=None) -> int:
    a = parse(sys.argv[1:] if argv is None else argv)
    try:
        config = config_for(a)
        if a.rows < 1:
            raise ConfigError("rows", a.rows, "a positive int (rows per depth)")
    except ConfigError as e:
        print(f"tasks_learning: error: {e}", file=sys.stderr)
        return 2
    from absl import logging as absl_logging

    from posjax.evaluation.run import batches, continued, restore
    from posjax.evaluation import methods
    from posjax.evaluation.run.tasks import sweep
    from posjax.training import train_and_evaluate

    absl_logging.set_verbosity(absl_logging.ERROR)
    t0 = time.perf_counter()
    try:  # a signal stops the training at a saved step: report it, evaluate nothing
        continued.finished(train_and_evaluate(config, a.workdir, progress_bar=False), a.workdir)
    except continued.Stopped as e:
        print(e, flush=True)
        return 0
    train_s = time.perf_counter() - t0
    run = restore.open_run(a.workdir)
    t = sweep.check(sweep.TaskSettings(("passkey",), a.rows, a.digits))
    rec = sweep.evaluate_task_cell(run, methods.Variant("as_is"), a.length, "passkey", t,
                                   batches.Settings(), methods.Options())
    if rec["status"] != "ok":
        print(f"tasks_learning: error: {rec['reason']}", file=sys.stderr)
        return 2
    o = rec["overall"]
    print(json.dumps({
        "steps": run.step, "fraction": a.fraction, "digits": a.digits, "length": a.length,
        "position": a.position, "rows": o["rows"], "train_s": round(train_s, 1),
        "exact": [o["exact"], o["exact_lo"], o["exact_hi"]], "exact_chance": 10.0 ** -a.digits,
        "per_digit": [o["digit_accuracy"], o["digit_accuracy_lo"], o["digit_accuracy_hi"]],
        "per_digit_chance": 0.1,
        "exact_by_depth": {d["depth"]: d["exact"] for d in rec["depths"]}}))
    return 0


if __name__ == "__main__":
    startup.start()  # before jax allocates: see posjax/startup.py
    sys.exit(main())
