r"""The algorithmic benchmark's train step (configs/algorithmic.py): time per bucket length,
and the mean step over the curriculum (input lengths uniform in 1..40).

    nice -n 10 python -m bench.algorithmic_step --config=reverse_string,rope --steps=5

The real step (plain Adam + clipping, donation, the class head) on real curriculum batches
(posjax.data.curriculum.make_batch), one compile per bucket; each bucket is timed as the
median of --steps steps after one warm-up step. The curriculum's mean step weights each
bucket by the share of input lengths that land in it.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import statistics
import time

import jax
import numpy as np

from configs import algorithmic as algorithmic_config
from posjax import models
from posjax.data import curriculum, tape
from posjax.training import sharding, state as state_lib
from posjax.training.optimizer import make_optimizer


def _setup(config_arg: str):
    """(config, task, setup, initial state) of configs/algorithmic.py's `config_arg`."""
    config = algorithmic_config.get_config(config_arg)
    task = curriculum.task_of(config)
    config.model.vocab_size = tape.empty_id(task.input_size) + 1
    mesh = sharding.make_mesh(config.mesh)
    setup = state_lib.make_setup(config, mesh, sharding.logical_rules(config.mesh),
                                 models.build_model, make_optimizer)
    return config, task, setup, setup.init_fn()


def _batch(config, task, n: int) -> dict:
    """A curriculum batch of input length n, padded to n's tape bucket."""
    d = config.data
    return curriculum.make_batch(
        task, np.random.default_rng(0), d.batch_size, n, bucket_multiple=d.bucket_multiple,
        seq_len=d.seq_len, randomized_max_length=d.randomized_max_length)


def bucket_step(config_arg: str, n: int):
    """(compiled train step, initial state, [batch]) at input length n (bench.dot_profile)."""
    config, task, setup, state = _setup(config_arg)
    batch = jax.device_put(_batch(config, task, n))
    step = state_lib.make_train_step(setup, config,
                                     state_lib.batch_shardings(batch, setup.mesh))
    return step.lower(state, batch).compile(), state, [batch]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="reverse_string,rope",
                   help="configs/algorithmic.py's argument: task[,scheme][,randomized]")
    p.add_argument("--steps", type=int, default=5, help="timed steps per bucket")
    args = p.parse_args(argv)

    config, task, setup, state = _setup(args.config)
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state["params"]))
    d = config.data
    bucket_of = {n: tape.bucket_length(n + task.output_length(n), d.bucket_multiple, d.seq_len)
                 for n in range(1, d.max_input_length + 1)}
    share = collections.Counter(bucket_of.values())
    step = None
    rows = []
    for bucket in sorted(share):
        n = max(k for k, b in bucket_of.items() if b == bucket)
        batch = _batch(config, task, n)
        if step is None:
            step = state_lib.make_train_step(setup, config,
                                             state_lib.batch_shardings(batch, setup.mesh))
        batch = jax.device_put(batch)
        t0 = time.perf_counter()
        state, m = step(state, batch)
        jax.block_until_ready(m)
        compile_s = time.perf_counter() - t0
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            state, m = step(state, batch)
            jax.block_until_ready(m)
            times.append(time.perf_counter() - t0)
        rows.append((bucket, share[bucket], compile_s, statistics.median(times), min(times)))
    total = sum(share.values())
    mean = sum(s * med for _, s, _, med, _ in rows) / total
    print(f"{args.config}: {n_params:,} params, batch {d.batch_size}, inputs 1..{d.max_input_length}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"jax {jax.__version__}, {args.steps} timed steps per bucket")
    print("| tape places | input lengths | first step (compile) s | median step s | min s |")
    print("|---|---|---|---|---|")
    for bucket, s, c, med, lo in rows:
        print(f"| {bucket} | {s} | {c:.1f} | {med:.3f} | {lo:.3f} |")
    print(f"curriculum mean step: {mean:.3f} s ({total} input lengths)")


if __name__ == "__main__":
    main()
