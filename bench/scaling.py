r"""Per-device memory and step time of the train step under each mesh preset (8 CPU devices).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \
        nice -n 10 python -m bench.scaling [--write]

Memory: the compiled step's memory_analysis() at the ':base' shapes of configs/base.py
(BERT-base: 12 x 768, 12 heads, 3072 mlp, vocab 21128, seq 512, bf16 compute) with the global
batch cut to 8 (one row per device) so it compiles on a CPU: 'state' = parameters + LAMB
moments held per device (argument bytes minus the batch), 'temp' = XLA scratch (activations,
gathered weights). Nothing is allocated for these (abstract state only).

Time: the real step run on synthetic batches at a reduced shape (--time_layers layers, seq
--time_seq, same width and vocab), because 8 simulated devices share this machine's few CPU
cores: compare presets with each other, not with an accelerator. Relative numbers only.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

import jax
import numpy as np

from posjax import defaults
from posjax import models
from posjax.training import sharding, state as state_lib
from posjax.training.optimizer import make_optimizer
from posjax.data.random_batch import random_batch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (preset, data, fsdp, tensor)
MESHES = (("data", 8, 1, 1), ("fsdp", 4, 2, 1), ("fsdp", 2, 4, 1), ("fsdp", 1, 8, 1),
          ("fsdp_tp", 2, 2, 2), ("fsdp_tp", 1, 4, 2))
GiB = 1024 ** 3


def config_for(preset, data, fsdp, tensor, batch, layers=None, seq=None):
    c = defaults.get_config("base")
    c.model.vocab_size = int(c.data.vocab_size)
    c.mesh.preset, c.mesh.data, c.mesh.fsdp, c.mesh.tensor = preset, data, fsdp, tensor
    c.data.batch_size = batch
    if layers:
        c.model.num_layers = layers
    if seq:
        c.data.seq_len = seq
    return c


def batch_structs(config):
    b, l = int(config.data.batch_size), int(config.data.seq_len)
    out = {k: jax.ShapeDtypeStruct((b, l), np.int32) for k in (
        "input_ids", "token_type_ids", "positions", "segment_ids", "mlm_targets")}
    out["mlm_weights"] = jax.ShapeDtypeStruct((b, l), np.float32)
    return out



def build(config):
    mesh = sharding.make_mesh(config.mesh)
    rules = sharding.logical_rules(config.mesh)
    sharding.check_model_divisible(config, mesh, rules)
    setup = state_lib.make_setup(config, mesh, rules, models.build_model, make_optimizer)
    batch = batch_structs(config)
    batch_sh = state_lib.batch_shardings(batch, mesh)
    return mesh, setup, batch_sh, state_lib.make_train_step(setup, config, batch_sh)


def memory(config) -> dict:
    mesh, setup, batch_sh, step = build(config)
    batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=batch_sh[k])
             for k, v in batch_structs(config).items()}
    t0 = time.perf_counter()
    compiled = step.lower(setup.abstract_state, batch).compile()
    compile_s = time.perf_counter() - t0
    ma = compiled.memory_analysis()
    batch_bytes = sum(int(np.prod(v.shape)) * 4 for v in batch.values()) / mesh.shape["data"] / mesh.shape["fsdp"]
    return {"state_gib": (ma.argument_size_in_bytes - batch_bytes) / GiB,
            "temp_gib": ma.temp_size_in_bytes / GiB, "compile_s": compile_s}


def step_time(config, steps: int) -> float:
    mesh, setup, batch_sh, step = build(config)
    state = setup.init_fn()
    rng = np.random.default_rng(0)
    put = lambda: jax.device_put(random_batch(config, rng), batch_sh)  # noqa: E731
    compiled = step.lower(state, put()).compile()
    state, m = compiled(state, put())  # warm-up
    jax.block_until_ready(m)
    t0 = time.perf_counter()
    for _ in range(steps):
        state, m = compiled(state, put())
    jax.block_until_ready(m)
    return (time.perf_counter() - t0) / steps


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8, help="global batch (':base' uses 256)")
    p.add_argument("--time_layers", type=int, default=2)
    p.add_argument("--time_seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--no_time", action="store_true", help="memory only")
    p.add_argument("--write", action="store_true", help="append the table to bench/RESULTS.md")
    args = p.parse_args()
    if jax.device_count() != 8:
        sys.exit("run with XLA_FLAGS=--xla_force_host_platform_device_count=8 (got "
                 f"{jax.device_count()} devices)")
    rows = []
    for preset, d, f, t in MESHES:
        mem = memory(config_for(preset, d, f, t, args.batch))
        sec = None if args.no_time else step_time(
            config_for(preset, d, f, t, args.batch, args.time_layers, args.time_seq), args.steps)
        rows.append((preset, f"{d}x{f}x{t}", mem, sec))
        print(f"{preset:8s} {d}x{f}x{t}: state {mem['state_gib']:.3f} GiB/device, temp "
              f"{mem['temp_gib']:.3f} GiB/device, compile {mem['compile_s']:.0f}s"
              + ("" if sec is None else f", step {sec:.2f}s"), flush=True)
    lines = ["| preset | mesh d x f x t | state GiB/device (base) | XLA temp GiB/device (base) "
             f"| step s ({args.time_layers} layers, seq {args.time_seq}) |", "|---|---|---|---|---|"]
    for preset, mesh, mem, sec in rows:
        lines.append(f"| {preset} | {mesh} | {mem['state_gib']:.3f} | {mem['temp_gib']:.3f} | "
                     + ("-" if sec is None else f"{sec:.2f}") + " |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        cmd = ("XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu nice -n 10 "
               "python -m bench.scaling " + " ".join(a for a in sys.argv[1:]))
        with open(os.path.join(REPO, "bench", "RESULTS.md"), "a") as fh:
            fh.write(f"\n## Scaling\n\n{datetime.date.today()}, jax {jax.__version__}, "
                     f"{platform.processor() or platform.machine()}, 8 simulated CPU devices on "
                     f"{os.cpu_count()} shared cores. `{cmd}`\n\n{table}\n")


if __name__ == "__main__":
    main()
