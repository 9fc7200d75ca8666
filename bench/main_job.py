r"""Wall time of the README's main job, `python train.py --config=configs/nezha.py`, end to end.

    python -m bench.main_job --runs=3
    python -m bench.main_job --runs=2 --cache=both   # each run twice: cold, then a rerun
    python -m bench.main_job --runs=1 -- --config.model.dtype=bfloat16

Each run is the real command in a fresh temporary workdir (deleted afterwards), as a user runs
it: start-up (imports, corpus, vocabulary), compile, 800 steps, the evaluations and the
checkpoints. Lines are timed as they arrive, so each run is split into start-up (until the
step compiled), training (until the last step's log line) and the rest. Reported per run and
as the median: wall, those phases, the median logged tokens/s, the last logged training loss
and the last held-out accuracy. Arguments after `--` go to train.py (config overrides).

Compilation cache (posjax/compilation_cache.py): every run gets a fresh, empty cache directory,
as on a fresh machine (--cache=cold, the default). --cache=both follows each cold run by a
rerun on the cache it filled, which is what a user sees the second time, and reports the two
kinds apart.

The target: within 90 s on a quiet 2-core machine, with the losses of
before. Not a test: numbers go into bench/README.md by hand, with the load average printed
here.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

flags.DEFINE_integer("runs", 3, "how many times to run the job")
flags.DEFINE_string("config", "configs/nezha.py", "train.py --config")
flags.DEFINE_enum("cache", "cold", ["cold", "both"], "cold: an empty compilation cache per run; "
                  "both: each cold run followed by a rerun on the cache it filled")
FLAGS = flags.FLAGS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP = re.compile(r"^step (\d+) \| loss ([0-9.]+) .*tokens/s (\d+)")
EVAL = re.compile(r"^eval step (\d+) \| .*mlm_accuracy ([0-9.]+)")


def run_once(extra: list[str], cache: str) -> dict:
    """One run of train.py in a fresh workdir, compiling through `cache`; the phases and
    numbers read off its log lines."""
    env = dict(os.environ, POSJAX_COMPILATION_CACHE=cache)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    with tempfile.TemporaryDirectory(prefix="posjax_main_job_") as tmp:
        cmd = [sys.executable, "-u", "train.py", f"--config={FLAGS.config}",
               f"--workdir={os.path.join(tmp, 'w')}", *extra]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
        out = dict(compiled_at=None, last_step_at=None, tokens_per_s=[], loss=None, acc=None)
        lines = []
        for line in proc.stdout:
            now = time.perf_counter() - t0
            lines.append(line)
            if "train step compiled" in line:
                out["compiled_at"] = now
            if m := STEP.match(line):
                out["last_step_at"], out["loss"] = now, float(m.group(2))
                out["tokens_per_s"].append(int(m.group(3)))
            if m := EVAL.match(line):
                out["acc"] = float(m.group(2))
        code = proc.wait()
        out["wall"] = time.perf_counter() - t0
    if code != 0 or out["compiled_at"] is None or out["last_step_at"] is None:
        sys.stdout.write("".join(lines[-20:]))
        raise SystemExit(f"main_job: {' '.join(cmd)} exited {code}")
    return out


def timed(extra: list[str], cache: str) -> dict:
    r = run_once(extra, cache)
    r["startup"] = r["compiled_at"]
    r["train"] = r["last_step_at"] - r["compiled_at"]
    r["rest"] = r["wall"] - r["last_step_at"]
    r["tps"] = statistics.median(r["tokens_per_s"])
    return r


def report(label: str, r: dict) -> None:
    print(f"{label}: wall {r['wall']:.1f} s (start-up {r['startup']:.1f}, training "
          f"{r['train']:.1f}, rest {r['rest']:.1f}), median {r['tps']:.0f} tokens/s, "
          f"loss {r['loss']:.4f}, held-out accuracy {r['acc']}", flush=True)


def main(argv):
    extra = argv[1:]
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{os.cpu_count()} CPUs; train.py --config={FLAGS.config} {' '.join(extra)}; "
          f"compilation cache: {FLAGS.cache}", flush=True)
    rows = {"cold": [], "rerun": []}
    for i in range(FLAGS.runs):
        with tempfile.TemporaryDirectory(prefix="posjax_main_job_cache_") as cache:
            rows["cold"].append(timed(extra, cache))
            report(f"run {i + 1}", rows["cold"][-1])
            if FLAGS.cache == "both":
                rows["rerun"].append(timed(extra, cache))
                report(f"run {i + 1}, rerun on its cache", rows["rerun"][-1])
    for kind, runs in rows.items():
        if not runs:
            continue
        med = {k: statistics.median(r[k] for r in runs)
               for k in ("wall", "startup", "train", "rest", "tps")}
        print(f"median of {len(runs)} {kind}: wall {med['wall']:.1f} s (start-up "
              f"{med['startup']:.1f}, training {med['train']:.1f}, rest {med['rest']:.1f}), "
              f"{med['tps']:.0f} tokens/s")
    print(f"load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    app.run(main)
