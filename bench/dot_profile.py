r"""Where a train step's time goes on XLA:CPU, dot product by dot product.

    python -m bench.dot_profile                  # the main job's step (configs/nezha.py)
    python -m bench.dot_profile --step=peer      # posjax's side of bench/peer_throughput.py

Times the compiled step, then runs it under jax's profiler and joins the trace (op time of
every thunk, by instruction name) with the compiled HLO (the dots inside each library
fusion, hence its FLOPs). Prints the op time by kind of op, then every dot shape with its
ms per step, GFLOP per step and GFLOP/s, and last two bounds: what the step would save if
its batched dots (the attention products) ran at the unbatched dots' rate, and if every dot
ran at this machine's square-matmul rate. Start it with GLIBC_TUNABLES=glibc.malloc.hugetlb=1,
as train.py starts itself (posjax/host_memory.py): page faults otherwise inflate the dots.

Op time is summed over threads, so on two cores it can exceed the step's wall time; the
bounds are op-time savings, an upper bound on the wall time saved.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import math
import os
import re
import tempfile
import time
from typing import NamedTuple

from absl import app, flags

flags.DEFINE_enum("step", "main", ["main", "peer"], "the main job's step or the peer bench's")
flags.DEFINE_string("config", "configs/nezha.py", "config file of --step=main")
flags.DEFINE_integer("steps", 6, "steps timed, and steps traced")
FLAGS = flags.FLAGS

_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) [^\n]*\{\n(.*?)\n\}", re.M | re.S)
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (\w+\[[\d,]*\])\S* (\w[\w\-]*)\((.*)$",
                          re.M)
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_LIBRARY = re.compile(r'"kind":"__(\w+?)_fusion"')


class Dot(NamedTuple):
    shape: tuple  # the result's dimensions
    k: int  # the contracted size
    batched: bool  # has batch dimensions (the attention products)

    @property
    def flops(self) -> float:
        return 2.0 * math.prod(self.shape) * self.k


def _dims(shape: str) -> tuple:
    inside = shape[shape.index("[") + 1:shape.index("]")]
    return tuple(int(x) for x in inside.split(",")) if inside else ()


def _dot(shapes: dict, out: str, rest: str) -> Dot:
    lhs = rest.split(",", 1)[0].strip().lstrip("%")
    lhs_dims = _dims(shapes[lhs]) if lhs in shapes else _dims(lhs)
    contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", rest).group(1)
    k = math.prod(lhs_dims[int(i)] for i in contracting.split(",") if i)
    return Dot(_dims(out), k, "lhs_batch_dims={" in rest and "lhs_batch_dims={}" not in rest)


def thunk_dots(hlo: str) -> tuple[dict[str, tuple[str, list[Dot]]], set]:
    """(instruction name -> (library, its dots), every instruction name) of the compiled
    program. The first holds each dot, and each fusion that holds dots: library 'ynn',
    'onednn', ... for a library fusion, 'xla' for a dot or fusion XLA runs itself."""
    bodies = dict(_COMPUTATION.findall(hlo))
    dots_in, names = {}, set()
    for name, body in bodies.items():
        shapes = {m.group(1): m.group(2) for m in _INSTRUCTION.finditer(body)}
        dots_in[name] = [(m.group(1), _dot(shapes, m.group(2), m.group(4)))
                         for m in _INSTRUCTION.finditer(body) if m.group(3) == "dot"]
        names.update(shapes)
    out, fused = {}, set()
    for body in bodies.values():
        for m in _INSTRUCTION.finditer(body):
            called = _CALLS.search(m.group(4)) if m.group(3) == "fusion" else None
            if called:
                fused.add(called.group(1))
                if dots_in.get(called.group(1)):
                    library = _LIBRARY.search(m.group(4))
                    out[m.group(1)] = (library.group(1) if library else "xla",
                                       [d for _, d in dots_in[called.group(1)]])
    for name in set(bodies) - fused:  # dots that are thunks of their own
        out.update((dot_name, ("xla", [d])) for dot_name, d in dots_in[name])
    return out, names


def op_times(trace_dir: str, steps: int) -> collections.Counter:
    """Thunk name -> op time in ms per step, from the newest trace under trace_dir."""
    path = max(glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True),
               key=os.path.getmtime)
    with gzip.open(path) as fh:
        trace = json.load(fh)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    times = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            times[e["name"]] += e["dur"] / 1000 / steps
    return times


def report(times: collections.Counter, dots: dict, names: set, peak: float,
           wall_ms: float) -> list[str]:
    ops = collections.Counter()
    for name, ms in times.items():
        if name in names:
            ops[re.sub(r"\.\d+$", "", name)] += ms
    lines = [f"op time {sum(ops.values()):.1f} ms/step (summed over threads), by kind:"]
    lines += [f"  {ms:8.1f} ms  {kind}" for kind, ms in ops.most_common(12)]

    groups = collections.defaultdict(lambda: [0.0, 0.0, 0])  # ms, GFLOP, count
    sides = {True: [0.0, 0.0], False: [0.0, 0.0]}  # batched or not: ms, GFLOP
    for name, (library, ds) in dots.items():
        ms = times.get(name, 0.0)
        if not ms:
            continue
        gflop = sum(d.flops for d in ds) / 1e9
        batched = any(d.batched for d in ds)
        group = groups[(library, batched, "; ".join(f"{list(d.shape)} K={d.k}" for d in ds))]
        group[0] += ms
        group[1] += gflop
        group[2] += 1
        sides[batched][0] += ms
        sides[batched][1] += gflop
    lines.append("dots: ms per step, count, GFLOP per step, GFLOP/s (* batched):")
    for (library, batched, desc), (ms, gflop, n) in sorted(groups.items(),
                                                          key=lambda kv: -kv[1][0]):
        lines.append(f"  {ms:8.1f} ms x{n:3d} {gflop:7.2f} GFLOP {gflop / ms * 1000:6.1f} GFLOP/s"
                     f" {'*' if batched else ' '} {library} {desc}")
    dot_ms = sides[True][0] + sides[False][0]
    dot_gflop = sides[True][1] + sides[False][1]
    lines.append(f"all dots: {dot_ms:.1f} ms, {dot_gflop:.2f} GFLOP, "
                 f"{dot_gflop / dot_ms * 1000:.1f} GFLOP/s; step wall {wall_ms:.1f} ms")
    (b_ms, b_gflop), (u_ms, u_gflop) = sides[True], sides[False]
    if b_ms and u_ms:
        rate = u_gflop / u_ms  # GFLOP per ms
        lines.append(f"bound 1: the batched dots ({b_ms:.1f} ms, {b_gflop:.2f} GFLOP, "
                     f"{b_gflop / b_ms * 1000:.1f} GFLOP/s) at the unbatched dots' "
                     f"{rate * 1000:.1f} GFLOP/s would save {b_ms - b_gflop / rate:.1f} ms")
    lines.append(f"bound 2: every dot at the square-matmul rate ({peak:.1f} GFLOP/s) would "
                 f"save {dot_ms - dot_gflop / peak * 1000:.1f} ms")
    return lines


def _step_and_inputs():
    """(compiled step, state, batches)."""
    if FLAGS.step == "peer":
        from bench.peer_throughput import SHAPES, PosjaxSide

        side = PosjaxSide(SHAPES["small"], "float32", "cpu")
        compiled = side.step.lower(side.state, side.batches[0]).compile()
        return compiled, side.state, side.batches
    from bench.job_step import job_step
    from posjax.training import state as state_lib

    config, setup, batch_sh, batches = job_step(FLAGS.config)
    state = setup.init_fn()
    compiled = state_lib.make_train_step(setup, config, batch_sh).lower(state, batches[0]).compile()
    return compiled, state, batches


def main(argv):
    del argv
    import jax

    from bench.peer_throughput import jax_matmul_peak

    compiled, state, batches = _step_and_inputs()
    dots, names = thunk_dots(compiled.as_text())

    def run(n):
        nonlocal state
        for i in range(n):
            state, metrics = compiled(state, batches[i % len(batches)])
        jax.block_until_ready(metrics)

    run(3)
    t0 = time.perf_counter()
    run(FLAGS.steps)
    wall_ms = (time.perf_counter() - t0) / FLAGS.steps * 1000
    trace_dir = tempfile.mkdtemp(prefix="posjax_dot_profile_")
    jax.profiler.start_trace(trace_dir)
    run(FLAGS.steps)
    jax.profiler.stop_trace()
    peak = jax_matmul_peak("float32", 2048) / 1e9
    print(f"--step={FLAGS.step}, {FLAGS.steps} steps timed then traced, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}")
    print("\n".join(report(op_times(trace_dir, FLAGS.steps), dots, names, peak, wall_ms)))


if __name__ == "__main__":
    app.run(main)
