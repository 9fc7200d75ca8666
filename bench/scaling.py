r"""Per-device memory, step time and communication of the train step under each mesh preset
(8 simulated CPU devices).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \
        nice -n 10 python -m bench.scaling [--no_time] [--presets data,fsdp] [--weak] [--write]

Memory: the compiled step's memory_analysis() at the ':base' shapes of configs/base.py
(BERT-base: 12 x 768, 12 heads, 3072 mlp, vocab 21128, seq 512, bf16 compute) with the global
batch cut to 8 (one row per device) so it compiles on a CPU: 'state' = parameters + LAMB
moments held per device (argument bytes minus the batch), 'temp' = XLA scratch (activations,
gathered weights), 'activations' = the part of temp that grows with the batch (a second
compile at twice the batch). Nothing is allocated for these (abstract state only). --weak adds
a weak-scaling table: 2, 4 and 8 devices with the global batch growing with them.

Communication: the collectives of the same compiled step read from its HLO text
(posjax/training/collectives.py), bytes per device per step, against the analytic expectation of each
preset (`expected_bytes`).

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

from posjax.config import defaults
from posjax import models
from posjax.training import sharding, state as state_lib
from posjax.training.optimizer import make_optimizer
from posjax.data.random_batch import random_batch

from posjax.training import collectives as col

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



def build(config, devices=None):
    mesh = sharding.make_mesh(config.mesh, devices)
    rules = sharding.logical_rules(config.mesh)
    sharding.check_model_divisible(config, mesh, rules)
    setup = state_lib.make_setup(config, mesh, rules, models.build_model, make_optimizer)
    batch = batch_structs(config)
    batch_sh = state_lib.batch_shardings(batch, mesh)
    return mesh, setup, batch_sh, state_lib.make_train_step(setup, config, batch_sh)


def compile_step(config, devices=None):
    """(mesh, setup, compiled train step, compile seconds), from abstract shapes only."""
    mesh, setup, batch_sh, step = build(config, devices)
    batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=batch_sh[k])
             for k, v in batch_structs(config).items()}
    t0 = time.perf_counter()
    compiled = step.lower(setup.abstract_state, batch).compile()
    return mesh, setup, compiled, time.perf_counter() - t0


def memory(config, devices=None, activations=True) -> dict:
    """Per device: 'state' (parameters + LAMB moments), XLA 'temp', 'act' = the part of temp
    that grows with the batch (temp at twice the batch minus temp at this batch: the
    activations kept for the backward pass and their gradients; gathered weights and other
    batch-independent scratch cancel), and the step's collectives ('comm', 'expected')."""
    mesh, setup, compiled, compile_s = compile_step(config, devices)
    ma = compiled.memory_analysis()
    batch = batch_structs(config)
    batch_bytes = sum(int(np.prod(v.shape)) * 4 for v in batch.values()) / mesh.shape["data"] / mesh.shape["fsdp"]
    out = {"state_gib": (ma.argument_size_in_bytes - batch_bytes) / GiB,
           "temp_gib": ma.temp_size_in_bytes / GiB, "compile_s": compile_s, "act_gib": None}
    ops = col.collectives(compiled.as_text())
    out["comm"] = col.totals(ops)
    out["comm_in_loop"] = sum(op.bytes for op in ops if op.in_loop)
    out["expected"] = expected_bytes(config, mesh, setup)
    out["expected_once"] = expected_bytes(config, mesh, setup, rematerialized=False)
    if activations:
        double = config.copy_and_resolve_references()
        double.data.batch_size = 2 * int(config.data.batch_size)
        twice = compile_step(double, devices)[2].memory_analysis().temp_size_in_bytes
        out["act_gib"] = (twice - ma.temp_size_in_bytes) / GiB
    return out


def _axes(spec) -> set:
    out = set()
    for a in spec:
        out.update(a if isinstance(a, tuple) else (a,) if a else ())
    return out


def expected_bytes(config, mesh, setup, rematerialized: bool = True, widened: bool = True) -> dict:
    """Analytic collective bytes per device of one train step (the buffer convention of
    posjax/training/collectives.py), term by term.

    Parameters and their gradients are float32. For each parameter with S elements split over
    `tensor` t ways:
      split over 'fsdp' (FSDP): an all-gather of its S/t elements in the forward pass and, with
        `rematerialized`, again in the backward pass; a reduce-scatter of the S/t-element
        gradient; an all-reduce over 'data' of its 1/fsdp shard when data > 1. (posjax's step
        has no rematerialization, so XLA may keep the forward's gathered weights for the
        backward pass and gather once: rematerialized=False counts that.)
      not split over 'fsdp': an all-reduce of the S/t-element gradient over data x fsdp.
    Tensor parallelism (tensor > 1) adds two all-reduces of the [rows, L, hidden] activation
    per layer per direction (attention output and MLP output forward, their inputs backward),
    rows = batch / (data * fsdp), plus the vocab-parallel lookup (one float32 [rows, L, E]
    all-reduce forward) and the tied head's input gradient ([rows, P, E], P the predicted
    places per row). Activation reductions are in the compute dtype, or float32 when
    `widened` (XLA's CPU backend widens 16-bit reductions to float32; on an accelerator the
    gradients of the bf16 matmuls are reduced in bf16 too). The loss's few scalars per row
    are left out.
    """
    d, f, t = (mesh.shape[a] for a in ("data", "fsdp", "tensor"))
    terms = {"param all-gather fwd": 0, "param all-gather bwd": 0, "grad reduce-scatter": 0,
             "grad all-reduce": 0, "tp activations": 0}
    flat = jax.tree_util.tree_flatten_with_path(setup.abstract_state["params"])[0]
    for _, x in flat:
        spec = x.sharding.spec
        axes = _axes(spec)
        size = int(np.prod(x.shape)) * 4
        size //= t if "tensor" in axes else 1
        if "fsdp" in axes:
            terms["param all-gather fwd"] += size
            terms["param all-gather bwd"] += size if rematerialized else 0
            terms["grad reduce-scatter"] += size
            if d > 1:
                terms["grad all-reduce"] += size // f
        elif d * f > 1:
            terms["grad all-reduce"] += size
    if t > 1:
        m = config.model
        rows = int(config.data.batch_size) // (d * f)
        length, hidden = int(config.data.seq_len), int(m.hidden)
        act = 4 if widened else np.dtype(jax.numpy.dtype(m.dtype)).itemsize
        places = state_lib.predictions_per_row(config, length) or length
        terms["tp activations"] = (4 * int(m.num_layers) * rows * length * hidden * act
                                   + rows * length * int(m.get("embedding_dim") or hidden) * 4
                                   + rows * places * hidden * act)
    terms["total"] = sum(terms.values())
    return terms


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


# weak scaling: (preset, devices) -> mesh (data, fsdp, tensor); rows per batch shard fixed
WEAK = {"data": lambda n: (n, 1, 1), "fsdp": lambda n: (1, n, 1),
        "fsdp_tp": lambda n: (1, n // 2, 2)}
MiB = 1024 ** 2


def _gib(x):
    return "-" if x is None else f"{x:.3f}"


def memory_table(rows, args) -> str:
    lines = ["| preset | mesh d x f x t | state GiB/device (base) | XLA temp GiB/device (base) "
             f"| activations GiB/device (batch {args.batch}) "
             f"| step s ({args.time_layers} layers, seq {args.time_seq}) |",
             "|---|---|---|---|---|---|"]
    for preset, mesh, mem, sec in rows:
        lines.append(f"| {preset} | {mesh} | {mem['state_gib']:.3f} | {mem['temp_gib']:.3f} | "
                     f"{_gib(mem['act_gib'])} | " + ("-" if sec is None else f"{sec:.2f}") + " |")
    return "\n".join(lines)


def comm_table(rows) -> str:
    """preset | expected | compiled bytes per device per step | ratio, and the kinds."""
    lines = ["| preset | mesh d x f x t | expected MiB/step/device (FSDP gathers fwd + bwd) "
             "| compiled MiB/step/device | ratio | expected, FSDP gathers once | ratio "
             "| compiled all-gather / reduce-scatter / all-reduce / all-to-all / permute MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for preset, mesh, mem, _ in rows:
        e, c = mem["expected"]["total"], mem["comm"]["total"]
        once = mem["expected_once"]["total"]
        kinds = " / ".join(f"{mem['comm'][k] / MiB:.1f}" for k in col.KINDS)
        lines.append(f"| {preset} | {mesh} | {e / MiB:.1f} | {c / MiB:.1f} | {c / e:.3f} | "
                     f"{once / MiB:.1f} | {c / once:.3f} | {kinds} |")
    return "\n".join(lines)


def weak_scaling(args) -> str:
    """Global batch = args.rows per batch shard x shards: per-device memory as devices grow."""
    lines = ["| preset | devices | mesh d x f x t | global batch | state GiB/device "
             "| temp GiB/device | activations GiB/device |", "|---|---|---|---|---|---|---|"]
    for preset, mesh_of in WEAK.items():
        for n in (2, 4, 8):
            d, f, t = mesh_of(n)
            batch = args.rows * d * f
            mem = memory(config_for(preset, d, f, t, batch), jax.devices()[:n],
                         activations=not args.no_activations)
            lines.append(f"| {preset} | {n} | {d}x{f}x{t} | {batch} | {mem['state_gib']:.3f} | "
                         f"{mem['temp_gib']:.3f} | {_gib(mem['act_gib'])} |")
            print(lines[-1], flush=True)
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8, help="global batch (':base' uses 256)")
    p.add_argument("--time_layers", type=int, default=2)
    p.add_argument("--time_seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--no_time", action="store_true", help="memory only")
    p.add_argument("--no_activations", action="store_true",
                   help="skip the second compile (twice the batch) that measures activations")
    p.add_argument("--presets", default=",".join(dict.fromkeys(m[0] for m in MESHES)),
                   help="comma-separated presets of MESHES to run")
    p.add_argument("--meshes", default="", help="comma-separated meshes (d x f x t: 2x4x1)")
    p.add_argument("--only_weak", action="store_true", help="the weak-scaling table only")
    p.add_argument("--weak", action="store_true",
                   help="also the weak-scaling table: 2, 4, 8 devices, --rows rows per shard")
    p.add_argument("--rows", type=int, default=1, help="weak scaling: rows per batch shard")
    p.add_argument("--write", action="store_true", help="append the tables to bench/scaling.md")
    args = p.parse_args()
    if jax.device_count() != 8:
        sys.exit("run with XLA_FLAGS=--xla_force_host_platform_device_count=8 (got "
                 f"{jax.device_count()} devices)")
    wanted = args.presets.split(",")
    rows = []
    for preset, d, f, t in () if args.only_weak else MESHES:
        if preset not in wanted or (args.meshes and f"{d}x{f}x{t}" not in args.meshes.split(",")):
            continue
        mem = memory(config_for(preset, d, f, t, args.batch), activations=not args.no_activations)
        sec = None if args.no_time else step_time(
            config_for(preset, d, f, t, args.batch, args.time_layers, args.time_seq), args.steps)
        rows.append((preset, f"{d}x{f}x{t}", mem, sec))
        e, c = mem["expected"]["total"], mem["comm"]["total"]
        print(f"{preset:8s} {d}x{f}x{t}: state {mem['state_gib']:.3f} GiB/device, temp "
              f"{mem['temp_gib']:.3f} GiB/device, activations {_gib(mem['act_gib'])} GiB/device, "
              f"compile {mem['compile_s']:.0f}s" + ("" if sec is None else f", step {sec:.2f}s")
              + f"; collectives {c / MiB:.1f} MiB/device (expected {e / MiB:.1f}): "
              + ", ".join(f"{k} {v / MiB:.1f}" for k, v in mem["comm"].items() if v and k != "total")
              + " (promoted = f32 reductions the CPU backend widened from bf16)"
              + "; expected " + ", ".join(f"{k} {v / MiB:.1f}" for k, v in mem["expected"].items()
                                          if v and k != "total")
              + (f"; {mem['comm_in_loop'] / MiB:.1f} MiB inside loops (counted once)"
                 if mem["comm_in_loop"] else ""), flush=True)
    table = memory_table(rows, args) + "\n\n" + comm_table(rows)
    if args.weak or args.only_weak:
        table += "\n\n" + weak_scaling(args)
    print(table)
    if args.write:
        cmd = ("XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu nice -n 10 "
               "python -m bench.scaling " + " ".join(a for a in sys.argv[1:]))
        with open(os.path.join(REPO, "bench", "scaling.md"), "a") as fh:
            fh.write(f"\n## Scaling\n\n{datetime.date.today()}, jax {jax.__version__}, "
                     f"{platform.processor() or platform.machine()}, 8 simulated CPU devices on "
                     f"{os.cpu_count()} shared cores. `{cmd}`\n\n{table}\n")


if __name__ == "__main__":
    main()
