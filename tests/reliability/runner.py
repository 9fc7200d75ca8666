"""Helpers for the reliability tests: run train.py in a subprocess, watch its output, signal it.

Every run of a pytest session shares one persistent compilation cache (`session_cache`), so
the tiny config's train step compiles once per session, not once per test module. Output (stdout + stderr merged) is read line by line while the
process runs, so a test can send a signal right after a given line appears.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Optional

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAN_RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nan_train.py")

# Tiny model, 12 steps, a checkpoint and a metrics line every step (log_every=1 makes the
# metrics file hold every step's own loss). Dropout stays on (base config: 0.1), so exact
# resume also needs the dropout keys restored, not only the parameters and the data position.
def tiny_args(steps: int, checkpoint_every: int) -> list[str]:
    """train.py arguments of the tiny reliability run: a metrics line every step, no eval."""
    return ["--config=configs/base.py:tiny", f"--config.train.steps={steps}",
            "--config.train.warmup_steps=2", "--config.train.log_every=1",
            "--config.train.eval_every=0", f"--config.train.checkpoint_every={checkpoint_every}",
            "--config.train.keep_checkpoints=3", "--progress_bar=false"]


STEPS = 12
ARGS = tiny_args(STEPS, checkpoint_every=1)


_SESSION_CACHE: list[str] = []


def session_cache() -> str:
    """The pytest run's XLA compilation cache directory (tests/conftest.py makes it), or one
    for this process's lifetime when the runner is used outside pytest (tests/reliability/chaos.py)."""
    if os.environ.get("POSJAX_TEST_XLA_CACHE"):
        return os.environ["POSJAX_TEST_XLA_CACHE"]
    if not _SESSION_CACHE:
        _SESSION_CACHE.append(tempfile.mkdtemp(prefix="posjax-test-xla-cache-"))
        atexit.register(shutil.rmtree, _SESSION_CACHE[0], True)
    return _SESSION_CACHE[0]


# Tests compile many tiny programs and run few steps of each: compiling is most of their CPU
# time. Without LLVM's optimizer a tiny train.py run costs about half the CPU, and XLA:CPU's
# older loop emitters instead of its MLIR fusion emitters take a third off what is left (same
# losses, slower steps; bench/README.md, test suite time). Tests only; every subprocess and
# the pytest process itself use it (tests/conftest.py).
NO_LLVM_OPT = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
FAST_COMPILE = NO_LLVM_OPT + " --xla_cpu_use_fusion_emitters=false"


def xla_flags(devices: Optional[int] = None) -> str:
    """XLA_FLAGS for a test process: FAST_COMPILE, and `devices` simulated CPU devices."""
    extra = f" --xla_force_host_platform_device_count={devices}" if devices else ""
    return FAST_COMPILE + extra


def make_env(cache_dir: Optional[str] = None) -> dict:
    """The environment of a train.py / eval.py subprocess: CPU, this checkout first on the
    path, unbuffered output, and a persistent compilation cache (default: the session's)."""
    cache_dir = cache_dir or session_cache()
    env = dict(os.environ)
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=REPO, JAX_COMPILATION_CACHE_DIR=cache_dir,
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", PYTHONUNBUFFERED="1")
    env["XLA_FLAGS"] = xla_flags()
    return env


class Run:
    """A train.py subprocess; `lines` collects its merged output as it arrives."""

    def __init__(self, args, env, *, script: str = "train.py", extra_env: Optional[dict] = None):
        e = dict(env, **(extra_env or {}))
        self.proc = subprocess.Popen([sys.executable, script, *args], cwd=REPO, env=e,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     bufsize=1)
        self.lines: list[str] = []

    def watch(self, actions: list[tuple[Callable[[str], bool], Callable[["Run"], None]]],
              timeout: float = 400) -> int:
        """Read output to the end; when a line satisfies actions[0]'s predicate, run its action
        and move on to the next. Returns the exit code."""
        deadline = time.monotonic() + timeout
        pending = list(actions)
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if pending and pending[0][0](line):
                pending.pop(0)[1](self)
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError("timed out:\n" + self.text[-3000:])
        return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def run(args, env, **kw) -> tuple[int, str]:
    r = Run(args, env, **kw)
    code = r.watch([])
    return code, r.text


def after_step(k: int):
    """Predicate: the metrics line of a step >= k."""
    pattern = re.compile(r"^step (\d+) \| loss")
    return lambda line: bool(pattern.match(line)) and int(pattern.match(line).group(1)) >= k


def saving(line: str) -> bool:
    return bool(re.match(r"^step \d+: saving checkpoint", line))


def saving_at_least(k: int):
    """Predicate: a 'saving checkpoint' line of a step >= k."""
    pattern = re.compile(r"^step (\d+): saving checkpoint")
    return lambda line: bool(pattern.match(line)) and int(pattern.match(line).group(1)) >= k


def metrics(workdir: str) -> list[dict]:
    """Every line of <workdir>/metrics.jsonl (a resumed run appends; steps may repeat)."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def step_losses(workdir: str) -> dict[int, list[float]]:
    """step -> every loss logged for it (more than one when a step was re-run after a kill)."""
    out: dict[int, list[float]] = {}
    for m in metrics(workdir):
        out.setdefault(int(m["step"]), []).append(m["step_loss"])
    return out


def checkpoint_steps(workdir: str) -> list[int]:
    d = os.path.join(workdir, "checkpoints")
    return sorted(int(n) for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []


def load_checkpoint(workdir: str, step: int) -> tuple[dict, dict]:
    """(state as a tree of numpy arrays, data item) of one checkpoint, read with orbax."""
    import orbax.checkpoint as ocp

    path = os.path.join(workdir, "checkpoints", str(step))
    state = ocp.StandardCheckpointer().restore(os.path.join(path, "state"))
    with open(os.path.join(path, "data", "metadata")) as f:
        data = json.load(f)
    return state, data


def assert_trees_equal(a, b) -> None:
    """Bitwise equality of two trees of arrays (same structure, same dtypes, same bits)."""
    import jax

    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb, (ta, tb)
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape, (x.dtype, y.dtype, x.shape, y.shape)
        assert x.tobytes() == y.tobytes(), "arrays differ bitwise"
