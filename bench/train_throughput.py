r"""Compile time and throughput of ONE jitted train step (the real step: LAMB, shardings, donation).

    python -m bench.train_throughput                       # CPU default + ':base' shapes
    python -m bench.train_throughput --configs=configs/nezha.py --steps=3 --write

Synthetic batches that follow the batch contract (no tokenizer, no corpus), so only the step is
timed. ':base' is BERT-base (12 x 768, seq 512) at a small batch (--base_batch, default 2) so
it fits a CPU time box; on an accelerator pass --base_batch=256. With --write the table is
appended to bench/train_throughput.md (the latest numbers are summed up in bench/README.md).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import sys
import time

import jax
import numpy as np

from posjax import models
from posjax.training import progress, sharding, state as state_lib
from posjax.training.optimizer import make_optimizer
from posjax.data.random_batch import random_batch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_config(path: str, variant: str):
    spec = importlib.util.spec_from_file_location("bench_config", os.path.join(REPO, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(variant)



def bench(config, steps: int) -> dict:
    config.model.vocab_size = int(config.data.vocab_size)
    models.validate_model_config(config, require_vocab=True)
    mesh = sharding.make_mesh(config.mesh)
    rules = sharding.logical_rules(config.mesh)
    setup = state_lib.make_setup(config, mesh, rules, models.build_model, make_optimizer)
    state = setup.init_fn()
    rng = np.random.default_rng(0)
    batch = random_batch(config, rng)
    batch_sh = state_lib.batch_shardings(batch, mesh)
    step_fn = state_lib.make_train_step(setup, config, batch_sh)
    t0 = time.perf_counter()
    compiled = step_fn.lower(state, jax.device_put(batch, batch_sh)).compile()
    compile_s = time.perf_counter() - t0
    state, m = compiled(state, jax.device_put(batch, batch_sh))  # warm-up (first run)
    jax.block_until_ready(m)
    t0 = time.perf_counter()
    for _ in range(steps):
        state, m = compiled(state, jax.device_put(random_batch(config, rng), batch_sh))
    jax.block_until_ready(m)
    step_s = (time.perf_counter() - t0) / steps
    b, l = int(config.data.batch_size), int(config.data.seq_len)
    flops = progress.training_flops_per_step(config, b, l)
    return dict(compile_s=compile_s, step_s=step_s, tokens_per_s=b * l / step_s,
                tflops_per_device=flops / step_s / mesh.size / 1e12, batch=b, seq_len=l,
                loss=float(m["loss"]))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="configs/nezha.py,configs/nezha.py:base")
    p.add_argument("--steps", type=int, default=1, help="timed steps after the warm-up step")
    p.add_argument("--base_batch", type=int, default=2)
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    rows = []
    for item in args.configs.split(","):
        path, _, variant = item.partition(":")
        config = load_config(path, variant)
        if variant == "base":
            config.data.batch_size = args.base_batch
        r = bench(config, args.steps)
        rows.append((item, r))
        print(f"{item}: batch {r['batch']} x {r['seq_len']}, compile {r['compile_s']:.1f}s, "
              f"step {r['step_s']:.3f}s, {r['tokens_per_s']:.0f} tokens/s, "
              f"{r['tflops_per_device']:.4f} TFLOP/s/device", flush=True)
    if args.write:
        write(rows, args)


def write(rows, args):
    path = os.path.join(REPO, "bench", "train_throughput.md")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    device = f"{jax.devices()[0].platform} x{jax.device_count()} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    cmd = "python -m bench.train_throughput " + " ".join(a for a in sys.argv[1:])
    lines = ["", "## Training throughput", "",
             f"`{cmd.strip()}` — {date}, {device}. One jitted train step (LAMB, shardings, donated "
             "state) on synthetic batches; compile = lower+compile of the step; step = mean of "
             f"{args.steps} timed step(s) after one warm-up step. ':base' = BERT-base shapes at "
             f"batch {args.base_batch} (CPU time box; use --base_batch=256 on an accelerator). "
             "TFLOP/s from posjax.training.progress.training_flops_per_step (MaxText-style).", "",
             "| config | batch x seq | compile s | step s | tokens/s | TFLOP/s/device |",
             "|---|---|---|---|---|---|"]
    for item, r in rows:
        lines.append(f"| `{item}` | {r['batch']} x {r['seq_len']} | {r['compile_s']:.1f} | "
                     f"{r['step_s']:.3f} | {r['tokens_per_s']:.0f} | {r['tflops_per_device']:.4f} |")
    with open(path, "a") as f:
        f.write("\n".join(lines) + "\n")
    print(f"appended to {path}")


if __name__ == "__main__":
    main()
