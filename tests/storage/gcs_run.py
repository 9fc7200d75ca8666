"""A tiny training, a resume and an eval, all with gs:// paths on the in-memory stand-in for
Cloud Storage (tests/storage/fake_gcs.py). One process (the stand-in lives in memory), run as
a subprocess by test_gcs_workdir.py; prints one JSON line with what it saw.

    python -m tests.storage.gcs_run
"""

from __future__ import annotations

import contextlib
import io
import json
import os

from tests.storage import fake_gcs

WORKDIR = "gs://posjax-test/runs/tiny"
OUT = "gs://posjax-test/eval/tiny"


def config():
    """tests/reliability/runner.py's ARGS (same compiled step: the session's compilation
    cache has it), checkpoints every 4 steps."""
    from posjax.config import defaults

    c = defaults.get_config("tiny")
    c.train.steps = 12
    c.train.warmup_steps = 2
    c.train.log_every = 1
    c.train.eval_every = 0
    c.train.checkpoint_every = 4
    c.train.keep_checkpoints = 10  # no deletions: orbax asks google-cloud-storage for those
    return c


def main() -> None:
    fake_gcs.start()
    from posjax import storage
    from posjax.evaluation import driver
    from posjax.training import train_and_evaluate

    first = train_and_evaluate(config(), WORKDIR, progress_bar=False)
    files_after_first = fake_gcs.files("posjax-test")
    # A preemption after step 4's save, as the bucket would show it: the later steps never
    # made it. The resumed run must continue from step 4 with the same batches.
    for step in (8, 12):
        storage.path(storage.join(WORKDIR, "checkpoints", str(step))).rmtree()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        second = train_and_evaluate(config(), WORKDIR, progress_bar=False)
    print(buf.getvalue(), end="")
    results = driver.run(driver.Request(out=OUT, workdirs=[WORKDIR], lengths=[32, 64],
                                        methods=["as_is"], masked_tokens=40, reliance=False,
                                        progress=False))
    metrics = [json.loads(line) for line in
               storage.read_text(storage.join(WORKDIR, "metrics.jsonl")).splitlines()]
    print(json.dumps({
        "first": {"start": first["start_step"], "step": first["step"]},
        "second": {"start": second["start_step"], "step": second["step"]},
        "resumed_line": [ln for ln in buf.getvalue().splitlines() if ln.startswith("resuming")],
        "metrics": [(m["step"], m["step_loss"]) for m in metrics],
        "files_after_first": files_after_first,
        "files": fake_gcs.files("posjax-test"),
        "cells": {k: v["status"] for k, v in results["cells"].items()},
        "local_entries": sorted(os.listdir(".")),
    }))


if __name__ == "__main__":
    main()
