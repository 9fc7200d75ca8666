"""Chaos soak: kill train.py at random moments, resume it each time, and check that the end
result is the uninterrupted run's, bit for bit (CPU float32).

    nice -n 10 python -m tests.reliability.chaos                       # 20 kills, seed 0
    python -m tests.reliability.chaos --kills=5 --seed=3 --steps=24

One uninterrupted reference run first (it also fills the compilation cache and measures how
long start-up takes), then a chain of runs on one workdir, each killed once and resumed with
the same command. Every kill draws, from a seeded RNG, a signal (SIGTERM: graceful stop, or
SIGKILL: no warning) and a moment:

  start-up  a delay after train.py installs its signal handler (first lines of main()),
            shorter than the last start-up measured (JAX import, data and vocabulary,
            checkpoint restore): kills before any step runs
  save      the moment orbax's temporary directory `<step>.orbax-checkpoint-tmp-*` of a step
            >= a drawn target appears in the checkpoints folder (polled every millisecond),
            i.e. while a checkpoint is being written
  step      right after the metrics line of a drawn step is printed (between two steps)

After the last kill one more run finishes the job. Checked at the end: every kill's exit code
(SIGTERM: 0 and one 'stopped ...' line; SIGKILL: killed), no traceback anywhere, every step's
metrics.jsonl values (all of them, also those of steps re-run after a kill) equal to the
reference's, and the final checkpoint (params, optimizer, RNG, step, data position) bitwise
equal. 'Steps lost' = steps computed twice because a kill threw them away (metrics lines beyond
one per step). Exit code 0 when everything holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time
from typing import Optional

from tests.reliability import runner

# Timing fields differ between any two runs; every other metrics field must be bit-equal.
TIMING = ("step_time_s", "tokens_per_s", "tflops_per_device")
PHASES = ("start-up", "save", "step")
ENDED = "(run ended first)"
TMP = re.compile(r"^(\d+)\.orbax-checkpoint-tmp")
STEP_LINE = re.compile(r"^step (\d+) \| loss")
# A SIGTERM ends a run with one of these lines (the last one: it landed during the final save)
STOPPED = re.compile(r"^(SIGTERM: stopped (after step \d+; checkpoint of step \d+ saved in "
                     r"|during start-up, before training began)|done: step \d+, checkpoint in )",
                     re.M)


def args_for(steps: int, workdir: str) -> list[str]:
    """The tiny config, a checkpoint every 2 steps (saves are frequent, so kills hit them) and
    a metrics line every step."""
    return ["--config=configs/tiny.py", f"--config.train.steps={steps}",
            "--config.train.warmup_steps=2", "--config.train.log_every=1",
            "--config.train.eval_every=0", "--config.train.checkpoint_every=2",
            "--config.train.keep_checkpoints=2", "--progress_bar=false", f"--workdir={workdir}"]


@dataclasses.dataclass
class Kill:
    sig: int
    phase: str            # what was drawn: start-up | save | step
    at: float             # start-up: seconds after spawn; save / step: a step number
    hit: str = ""         # where the signal really landed (see `_landed`)
    code: Optional[int] = None
    problem: str = ""     # empty when the run behaved as it should
    startup_s: Optional[float] = None  # how long this run's start-up took (if it got there)

    def describe(self) -> str:
        name = signal.Signals(self.sig).name
        return f"{name:7s} drawn {self.phase:8s} landed {self.hit or '-':22s} exit {self.code}"


def _landed(lines: list[str], saving_tmp: bool) -> str:
    """Where a signal landed, from the output printed before it was sent."""
    if saving_tmp:
        return "during a save"
    if not any(line.startswith("posjax train:") for line in lines):
        restoring = any(line.startswith("resuming from step") for line in lines)
        return "start-up (after restore)" if restoring else "start-up (data/restore)"
    steps = [int(m.group(1)) for m in map(STEP_LINE.match, lines) if m]
    return f"after step {steps[-1]}" if steps else "compile"


def _catches_sigterm(pid: int) -> bool:
    """Whether process `pid` has a SIGTERM handler installed (Linux: SigCgt in /proc)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    except (OSError, StopIteration):
        return False
    return bool(int(mask, 16) >> (signal.SIGTERM - 1) & 1)


def kill_run(args, env, kill: Kill, ckpt_dir: str, timeout: float) -> tuple[int, str]:
    """One train.py run, signalled once as `kill` says. Returns (exit code, output)."""
    r = runner.Run(args, env)
    t0 = time.monotonic()
    fired = threading.Event()
    lock = threading.Lock()
    done = threading.Event()

    def fire(saving_tmp: bool = False):
        with lock:
            if fired.is_set():
                return
            kill.hit = _landed(list(r.lines), saving_tmp)
            fired.set()
            try:
                r.signal(kill.sig)
            except ProcessLookupError:
                pass

    if kill.phase == "start-up":
        def after_handler():
            # From the moment train.py's handler is installed (the first lines of main(),
            # before JAX, data and restore); earlier, only the interpreter and absl are loading.
            while not done.is_set() and not _catches_sigterm(r.proc.pid):
                time.sleep(0.005)
            if not done.wait(kill.at):
                fire()
        threading.Thread(target=after_handler, daemon=True).start()
    elif kill.phase == "save":
        def tmp_dirs():
            out = set()
            try:
                with os.scandir(ckpt_dir) as it:
                    for e in it:
                        m = TMP.match(e.name)
                        if m and int(m.group(1)) >= kill.at:
                            out.add((e.name, e.inode()))
            except OSError:
                pass
            return out

        # A SIGKILL mid-save leaves its tmp directory behind: only one created by THIS run
        # (a new name or inode) is a save in progress.
        leftovers = tmp_dirs()

        def watch_tmp():
            while not done.is_set() and not fired.is_set():
                if tmp_dirs() - leftovers:
                    fire(saving_tmp=True)
                time.sleep(0.001)
        threading.Thread(target=watch_tmp, daemon=True).start()

    def step_reached(line):
        if line.startswith("posjax train:"):
            kill.startup_s = time.monotonic() - t0
        m = STEP_LINE.match(line)
        return kill.phase == "step" and bool(m) and int(m.group(1)) >= kill.at

    try:
        code = r.watch([(step_reached, lambda _: fire())], timeout=timeout)
    finally:
        done.set()
    if not fired.is_set():
        kill.hit = ENDED
    return code, r.text


def _check_kill(kill: Kill, code: int, text: str) -> None:
    kill.code = code
    if "Traceback" in text:
        kill.problem = "traceback in the output"
    elif kill.hit == ENDED:
        kill.problem = ""  # not a kill; the soak draws another
    elif kill.sig == signal.SIGKILL:
        if code != -signal.SIGKILL:
            kill.problem = f"exit {code}, expected killed by SIGKILL"
    elif code != 0:
        kill.problem = f"exit {code} after SIGTERM, expected 0"
    elif not STOPPED.search(text):
        kill.problem = "SIGTERM: no 'stopped ...' line"


def _draw(rng: random.Random, last_ckpt: int, steps: int, startup_s: float) -> Kill:
    sig = rng.choice((signal.SIGTERM, signal.SIGKILL))
    # Targets a few steps past the latest checkpoint (so the chain keeps making progress
    # without running out of steps); start-up when no step is left to aim at.
    hi = min(steps - 2, last_ckpt + 3)
    phase = rng.choice(PHASES) if hi > last_ckpt + 1 else "start-up"
    if phase == "start-up":
        # startup_s runs from spawn to the 'posjax train:' line; the delay counts from the
        # handler's installation, a second or two later: 0.8 keeps most draws inside start-up.
        return Kill(sig, phase, round(rng.uniform(0.0, 0.8 * startup_s), 2))
    return Kill(sig, phase, rng.randint(last_ckpt + 1, hi))


def compare(workdir: str, reference: str, steps: int) -> list[str]:
    """What differs from the reference (empty list: bit-equal)."""
    diffs = []
    ref = {m["step"]: m for m in runner.metrics(reference)}
    got = runner.metrics(workdir)
    if sorted({m["step"] for m in got}) != list(range(1, steps + 1)):
        diffs.append(f"metrics.jsonl steps {sorted({m['step'] for m in got})}")
    for m in got:
        r = ref.get(m["step"], {})
        for k, v in m.items():
            # json floats round-trip exactly; NaN never appears here (the tiny run is finite)
            if k not in TIMING and r.get(k) != v:
                diffs.append(f"step {m['step']} {k}: {v!r} != reference {r.get(k)!r}")
    try:
        state, data = runner.load_checkpoint(workdir, steps)
        ref_state, ref_data = runner.load_checkpoint(reference, steps)
        runner.assert_trees_equal(state, ref_state)
        if data != ref_data:
            diffs.append(f"data position {data} != reference {ref_data}")
    except (AssertionError, OSError, ValueError) as e:
        diffs.append(f"final checkpoint: {type(e).__name__}: {str(e)[:200]}")
    return diffs


@dataclasses.dataclass
class Result:
    kills: list
    steps: int
    steps_lost: int
    diffs: list
    problems: list
    wall_s: float

    @property
    def ok(self) -> bool:
        return not self.diffs and not self.problems


def soak(root: str, *, kills: int = 20, seed: int = 0, steps: int = 40,
         plan: Optional[list[Kill]] = None, env: Optional[dict] = None,
         reference: Optional[str] = None, log=print, timeout: float = 600) -> Result:
    """Run the soak under `root` (a fresh directory). `plan` fixes the kills instead of
    drawing them; `reference` names a finished uninterrupted workdir to compare with (by
    default one is run first)."""
    t0 = time.monotonic()
    env = env or runner.make_env(os.path.join(root, "jax_cache"))
    startup_s = 5.0
    if reference is None:
        reference = os.path.join(root, "reference")
        t = time.monotonic()
        r = runner.Run(args_for(steps, reference), env)
        seen = {}
        code = r.watch([(lambda line: line.startswith("posjax train:"),
                         lambda _: seen.setdefault("startup", time.monotonic() - t))],
                       timeout=timeout)
        if code != 0:
            raise RuntimeError("the reference run failed:\n" + r.text[-3000:])
        startup_s = max(1.0, seen.get("startup", startup_s))
        log(f"reference: {steps} steps in {time.monotonic() - t:.0f}s (start-up {startup_s:.1f}s)")
    wd = os.path.join(root, "chain")
    ckpt_dir = os.path.join(wd, "checkpoints")
    rng = random.Random(seed)
    done: list[Kill] = []
    problems: list[str] = []
    todo = list(plan) if plan is not None else None
    target = len(todo) if todo is not None else kills
    while sum(k.hit != ENDED for k in done) < target:
        last = max(runner.checkpoint_steps(wd), default=0)
        kill = todo.pop(0) if todo else _draw(rng, last, steps, startup_s)
        code, text = kill_run(args_for(steps, wd), env, kill, ckpt_dir, timeout)
        _check_kill(kill, code, text)
        done.append(kill)
        if kill.startup_s:  # start-up gets faster once the data cache exists: aim at the latest
            startup_s = max(1.0, kill.startup_s)
        log(f"kill {len(done):2d}: {kill.describe()}" + (f"  PROBLEM: {kill.problem}"
                                                         if kill.problem else ""))
        if kill.problem:
            problems.append(f"kill {len(done)}: {kill.problem}\n" + text[-2000:])
        if kill.hit == ENDED:
            problems.append(f"kill {len(done)}: the run finished before its kill")
            break
    code, text = runner.run(args_for(steps, wd), env)
    if code != 0 or f"done: step {steps}" not in text and "nothing to do" not in text:
        problems.append(f"final run: exit {code}\n{text[-2000:]}")
    if "Traceback" in text:
        problems.append("final run: traceback\n" + text[-2000:])
    logged = runner.metrics(wd) if os.path.exists(os.path.join(wd, "metrics.jsonl")) else []
    diffs = compare(wd, reference, steps)
    real = [k for k in done if k.hit != ENDED]
    return Result(real, steps, len(logged) - len({m["step"] for m in logged}), diffs, problems,
                  time.monotonic() - t0)


def report(res: Result) -> str:
    by = {}
    for k in res.kills:
        key = (signal.Signals(k.sig).name,
               "between steps" if k.hit.startswith("after step") else k.hit)
        by[key] = by.get(key, 0) + 1
    kinds = ", ".join(f"{n} {sig} {where}" for (sig, where), n in sorted(by.items()))
    survived = sum(not k.problem for k in res.kills)
    lines = [f"kills survived: {survived}/{len(res.kills)} ({kinds})",
             f"steps lost (recomputed after a kill): {res.steps_lost} of {res.steps}",
             "final parameters, optimizer, RNG, data position and every metrics.jsonl value: "
             + ("bit-equal to the uninterrupted run" if not res.diffs else
                f"DIFFERENT ({len(res.diffs)}): " + "; ".join(res.diffs[:5])),
             f"wall {res.wall_s:.0f}s"]
    lines += [f"PROBLEM: {p}" for p in res.problems]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--root", default=None, help="where the workdirs go (default: a tmp dir)")
    a = p.parse_args(argv)
    if a.kills < 1 or a.steps < 4:
        p.error("--kills must be >= 1 and --steps >= 4")
    root = a.root or tempfile.mkdtemp(prefix="posjax_chaos_")
    print(f"chaos soak: {a.kills} kills, seed {a.seed}, {a.steps} steps, in {root}", flush=True)
    res = soak(root, kills=a.kills, seed=a.seed, steps=a.steps,
               log=lambda line: print(line, flush=True))
    print(report(res), flush=True)
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
