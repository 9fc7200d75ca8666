"""A compiled program's dot products joined with a profiler trace of it: the op time of every
dot shape, its FLOPs and GFLOP/s, and two bounds on what faster dots would save. Pure text
and JSON parsing (no JAX): bench/dot_profile.py runs it on the train step.

    dots, names = thunk_dots(compiled.as_text())
    print("\n".join(report(op_times(trace_dir, steps), dots, names, peak_gflops, wall_ms)))
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import math
import os
import re
from typing import NamedTuple

_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) [^\n]*\{\n(.*?)\n\}", re.M | re.S)
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (\w+\[[\d,]*\])\S* (\w[\w\-]*)\((.*)$",
                          re.M)
# every instruction's name, whatever its shape (a multi-output custom call's is a tuple)
_NAME = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = ", re.M)
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_LIBRARY = re.compile(r'"kind":"__(\w+?)_fusion"')
# A while loop's body runs known_trip_count times per run of the computation that holds the
# loop (XLA states the count for scans); a call's computation once.
_WHILE = re.compile(r" while\(.*?body=%?([\w.\-]+)(.*)$", re.M)
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_CALL = re.compile(r" call\(.*?to_apply=%?([\w.\-]+)", re.M)


class Dot(NamedTuple):
    shape: tuple  # the result's dimensions
    k: int  # the contracted size
    batched: bool  # has batch dimensions (the attention products)
    runs: int = 1  # times it runs per step: the trip counts of the loops around it

    @property
    def flops(self) -> float:
        """Per step: a trace's op time of an instruction in a loop sums all its runs."""
        return 2.0 * math.prod(self.shape) * self.k * self.runs


def _dims(shape: str) -> tuple:
    inside = shape[shape.index("[") + 1:shape.index("]")]
    return tuple(int(x) for x in inside.split(",")) if inside else ()


def _dot(shapes: dict, out: str, rest: str) -> Dot:
    lhs = rest.split(",", 1)[0].strip().lstrip("%")
    lhs_dims = _dims(shapes[lhs]) if lhs in shapes else _dims(lhs)
    contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", rest).group(1)
    k = math.prod(lhs_dims[int(i)] for i in contracting.split(",") if i)
    return Dot(_dims(out), k, "lhs_batch_dims={" in rest and "lhs_batch_dims={}" not in rest)


def _runs(bodies: dict) -> dict[str, int]:
    """Computation name -> times it runs per run of the entry computation (loop nests
    multiply; a loop whose trip count XLA does not state counts once)."""
    inside = {}  # computation -> (the computation that runs it, times per run of that one)
    for name, body in bodies.items():
        for m in _WHILE.finditer(body):
            trips = _TRIPS.search(m.group(2))
            inside[m.group(1)] = (name, int(trips.group(1)) if trips else 1)
        for called in _CALL.findall(body):
            inside.setdefault(called, (name, 1))

    def runs(name: str) -> int:
        if name not in inside:  # the entry computation
            return 1
        parent, n = inside[name]
        return n * runs(parent)

    return {name: runs(name) for name in bodies}


def thunk_dots(hlo: str) -> tuple[dict[str, tuple[str, list[Dot]]], set]:
    """(instruction name -> (library, its dots), every instruction name) of the compiled
    program. The first holds each dot, and each fusion that holds dots: library 'ynn',
    'onednn', ... for a library fusion, 'xla' for a dot or fusion XLA runs itself. A dot
    inside loops carries their trip counts (Dot.runs)."""
    bodies = dict(_COMPUTATION.findall(hlo))
    runs = _runs(bodies)
    dots_in, names = {}, set()
    for name, body in bodies.items():
        shapes = {m.group(1): m.group(2) for m in _INSTRUCTION.finditer(body)}
        dots_in[name] = [(m.group(1), _dot(shapes, m.group(2), m.group(4)))
                         for m in _INSTRUCTION.finditer(body) if m.group(3) == "dot"]
        names.update(_NAME.findall(body))
    out, fused = {}, set()
    for name, body in bodies.items():
        for m in _INSTRUCTION.finditer(body):
            called = _CALLS.search(m.group(4)) if m.group(3) == "fusion" else None
            if called:
                fused.add(called.group(1))
                if dots_in.get(called.group(1)):
                    library = _LIBRARY.search(m.group(4))
                    out[m.group(1)] = (library.group(1) if library else "xla",
                                       [d._replace(runs=runs[name])
                                        for _, d in dots_in[called.group(1)]])
    for name in set(bodies) - fused:  # dots that are thunks of their own
        out.update((dot_name, ("xla", [d._replace(runs=runs[name])]))
                   for dot_name, d in dots_in[name])
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


# A dot whose op time implies more than this multiple of the machine's square-matmul rate was
# not timed by the trace (XLA's own dots run asynchronously); the report leaves it out.
UNTIMED_OVER_PEAK = 2.0


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
    untimed = []
    for name, (library, ds) in dots.items():
        ms = times.get(name, 0.0)
        if not ms:
            continue
        gflop = sum(d.flops for d in ds) / 1e9
        batched = any(d.batched for d in ds)
        if gflop / ms * 1000 > UNTIMED_OVER_PEAK * peak:
            # XLA:CPU runs its own (Eigen) dots asynchronously: the trace holds their launch,
            # not their work, so their op time says nothing of their rate
            untimed.append(f"{list(ds[0].shape)} K={ds[0].k}")
            continue
        group = groups[(library, batched, "; ".join(
            f"{list(d.shape)} K={d.k}" + (f" (x{d.runs} in loops)" if d.runs > 1 else "")
            for d in ds))]
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
    if untimed:
        lines.append(f"  not timed ({len(untimed)}: traced faster than {UNTIMED_OVER_PEAK:g}x "
                     f"the square-matmul rate, launched asynchronously): "
                     + ", ".join(sorted(set(untimed))))
    dot_ms = sides[True][0] + sides[False][0]
    dot_gflop = sides[True][1] + sides[False][1]
    if not dot_ms:
        return lines + [f"no timed dots; step wall {wall_ms:.1f} ms"]
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
