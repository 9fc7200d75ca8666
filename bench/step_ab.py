r"""A/B of the main job's train step in ONE process: variants compiled side by side, their steps
alternated in rounds, so that the machine's drift (this VM's speed moves by +-20% within
minutes) falls on every variant alike.

    python -m bench.step_ab '{"xla_cpu_opt_preset": "CPU_OPT_PRESET_FAST_RUNTIME"}'
    python -m bench.step_ab --rounds=12 'env:MY_SWITCH=1'
    taskset -c 0 python -m bench.step_ab ...      # one core: CPU cost without the thread pool
    python -m bench.step_ab --step=peer --shape=algorithmic 'env:NOTHING=1' 'env:MY_SWITCH=1'
    git show HEAD~1:posjax/attention/cpu_attention.cc > /tmp/old.cc
    python -m bench.step_ab --step=peer 'kernel:/tmp/old.cc' 'kernel:/tmp/old.cc'

The baseline (no change) always runs first. A variant is either a JSON object of XLA compiler
options, or `env:NAME=VALUE[,NAME=VALUE]`: environment variables set while that variant is
traced, for a code path switched by a temporary os.environ check (trace-time only), or
`kernel:PATH`: the CPU attention kernel (posjax/attention/native.py) built from the C++
source PATH under its own FFI target names, which that variant's step calls; or several
joined by ';'. Prints
per variant the median wall and process-CPU time per step, and against the baseline the
median of the per-round ratios with its range. An unchanged variant (`env:NOTHING=1`) is a
control: its ratio shows how far the noise alone reaches (variants are told apart by their
text: two identical ones would share one compiled step). The step and batches are the real ones:
configs/nezha.py (or --config), the People's Daily batches of the pipeline, LAMB, donation;
or with --step=peer, posjax's side of bench/peer_throughput.py at --shape (its synthetic
batches; 'algorithmic': the small-model benchmark's shape).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import time

from absl import app, flags

from bench.kernel_build import kernel_target

flags.DEFINE_enum("step", "main", ["main", "peer"],
                  "the main job's step, or posjax's side of bench/peer_throughput.py")
flags.DEFINE_string("config", "configs/nezha.py", "config file of --step=main")
flags.DEFINE_string("shape", "algorithmic", "--step=peer: a shape of bench/peer_throughput.py")
flags.DEFINE_integer("rounds", 8, "rounds; each times every variant once")
flags.DEFINE_integer("steps", 6, "steps per variant per round")
FLAGS = flags.FLAGS


def _parse(variant: str) -> tuple[dict, dict, str]:
    """(compiler options, environment, kernel source or '') of one variant: 'env:A=1,B=2',
    '{json}', 'kernel:PATH', or several joined by ';' ('env:A=1;{json}')."""
    options, env, kernel = {}, {}, ""
    for part in variant.split(";"):
        if part.startswith("env:"):
            env.update(kv.split("=", 1) for kv in part[4:].split(",") if kv)
        elif part.startswith("kernel:"):
            kernel = part[len("kernel:"):]
        else:
            options.update(json.loads(part))
    return options, env, kernel


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv):
    import jax

    from posjax.training import state as state_lib

    if FLAGS.step == "peer":
        from bench.peer_throughput import SHAPES, PosjaxSide

        batches = None

        def lower():  # a new side per variant: a new jit, traced under the variant's env
            nonlocal batches
            side = PosjaxSide(SHAPES[FLAGS.shape], "float32", "cpu")
            batches = batches or side.batches
            return side.step.lower(side.state, batches[0]), side.state
    else:
        from bench.job_step import job_step

        config, setup, batch_sh, batches = job_step(FLAGS.config)

        def lower():
            state = setup.init_fn()
            step = state_lib.make_train_step(setup, config, batch_sh)
            return step.lower(state, batches[0]), state

    variants = ["baseline"] + argv[1:]
    steps, states = {}, {}
    from posjax.attention import native

    for v in variants:
        options, env, kernel = _parse(v) if v != "baseline" else ({}, {}, "")
        saved, saved_target = dict(os.environ), native.TARGET
        os.environ.update(env)
        if kernel:
            native.TARGET = kernel_target(kernel)
        try:
            lowered, state = lower()
        finally:
            os.environ.clear()
            os.environ.update(saved)
            native.TARGET = saved_target
        t0 = time.perf_counter()
        steps[v] = lowered.compile(compiler_options=options) if options else lowered.compile()
        print(f"compiled {v} in {time.perf_counter() - t0:.1f} s", flush=True)
        states[v] = state
    for v in variants:  # warm-up
        for b in batches[:3]:
            states[v], m = steps[v](states[v], b)
        jax.block_until_ready(m)

    wall = {v: [] for v in variants}
    cpu = {v: [] for v in variants}
    for _ in range(FLAGS.rounds):
        for v in variants:
            t0, c0 = time.perf_counter(), _cpu()
            for i in range(FLAGS.steps):
                states[v], m = steps[v](states[v], batches[i % len(batches)])
            jax.block_until_ready(m)
            wall[v].append((time.perf_counter() - t0) / FLAGS.steps * 1000)
            cpu[v].append((_cpu() - c0) / FLAGS.steps * 1000)
    load = os.getloadavg()[0]
    print(f"{FLAGS.rounds} rounds x {FLAGS.steps} steps, {os.cpu_count()} CPUs, "
          f"load average {load:.2f}")
    for v in variants:
        line = (f"{v}: wall {statistics.median(wall[v]):.1f} ms/step, "
                f"CPU {statistics.median(cpu[v]):.1f} ms/step")
        if v != "baseline":
            ratios = [a / b for a, b in zip(wall[v], wall["baseline"])]
            line += (f", wall / baseline per round: median {statistics.median(ratios):.3f} "
                     f"[{min(ratios):.3f}, {max(ratios):.3f}]")
        print(line)


if __name__ == "__main__":
    app.run(main)
