"""The collectives of a compiled XLA program and their bytes, read from its HLO text.

    from posjax.training.collectives import collectives, totals
    ops = collectives(jitted.lower(*args).compile().as_text())
    totals(ops)  # {'all-gather': bytes, 'all-reduce': bytes, ...}

Bytes are per device and count the buffer the collective works on, the same for every kind:
the gathered result of an all-gather, the unreduced input of a reduce-scatter (result x group
size), the operand of an all-reduce, all-to-all or collective-permute. That makes a
reduce-scatter and the all-reduce + slice some backends lower it to count alike. The bytes on
the wire follow from it and the group size (a ring all-reduce sends 2 (n-1)/n of it, an
all-gather or reduce-scatter (n-1)/n). Async pairs (`*-start` / `*-done`) count once, at the
start. An instruction inside a loop body counts once, not once per iteration: `in_loop` says
where that happened.
"""

from __future__ import annotations

import dataclasses
import re

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")

DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
               "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}

_SHAPE = re.compile(r"\b([a-z]+[0-9]*(?:e\d+m\d+\w*)?)\[([0-9,]*)\]")
# `%name = <result type> <opcode>(` ; the result type may be a tuple containing spaces.
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s+(" + "|".join(KINDS)
                    + r")(-start)?\((.*)$")
# a computation's header starts at column 0 (instructions are indented) and opens a block
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")
_BODY = re.compile(r"\bbody=%?([\w.\-]+)")


@dataclasses.dataclass(frozen=True)
class Collective:
    kind: str  # one of KINDS
    bytes: int  # per device, see the module docstring
    group: int  # devices in each replica group (0 = unknown / all)
    computation: str  # the HLO computation it sits in
    in_loop: bool  # inside a while body: executed once per iteration, counted once
    # The backend widened it (its reduction computation is named '*promoted'): XLA's CPU
    # backend has no 16-bit reductions and turns a bf16 all-reduce the partitioner made into
    # an f32 one. `bytes` is what the program moves; on an accelerator the 16-bit members
    # would move half (a combined all-reduce may also hold members that were f32 already).
    promoted: bool = False


def shape_bytes(text: str) -> list[int]:
    """Bytes of every array shape in an HLO type string, in order ('(f32[2,3], bf16[4])')."""
    out = []
    for dtype, dims in _SHAPE.findall(text):
        if dtype not in DTYPE_BYTES and not dtype.startswith("f8"):
            continue
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        out.append(n * DTYPE_BYTES.get(dtype, 1))
    return out


def group_size(attrs: str) -> int:
    """Devices per replica group: `{{0,1},{2,3}}` -> 2, iota `[4,2]<=[8]` -> 2, mesh axes
    `mesh['a'=2,'b'=4] {'b'}` or `mesh['a'=4,'b'=2], device_ids=([2,4]T(1,0)) {'a'}` -> the
    product of the braced axes' sizes, `{}` -> 0 (all devices)."""
    m = re.search(r"replica_groups=mesh\[([^\]]*)\](?:,\s*device_ids=\((?:[^()]|\([^()]*\))*\))?\s*"
                  r"\{([^}]*)\}", attrs)
    if m:
        sizes = {k: int(v) for k, v in re.findall(r"'([^']+)'=(\d+)", m.group(1))}
        n = 1
        for axis in re.findall(r"'([^']+)'", m.group(2)):
            n *= sizes.get(axis, 1)
        return n
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]", attrs)
    if m:
        return int(m.group(2))
    m = re.search(r"replica_groups=\{\{([0-9,]*)\}", attrs)
    if m:
        return len([x for x in m.group(1).split(",") if x])
    m = re.search(r"source_target_pairs=\{", attrs)
    return 2 if m else 0


def collectives(hlo_text: str) -> list[Collective]:
    """Every collective instruction of a (compiled, per-device) HLO module's text."""
    lines = hlo_text.splitlines()
    loop_bodies = set(_BODY.findall(hlo_text))
    found = []
    computation = ""
    for line in lines:
        m = _COMPUTATION.match(line)
        if m:
            computation = m.group(1)
            continue
        m = _INSTR.match(line)
        if not m:
            continue
        result, kind, start, rest = m.groups()
        sizes = shape_bytes(result)
        if not sizes:
            continue
        group = group_size(rest)
        if start and kind in ("all-gather", "collective-permute"):
            # (operands..., results..., [u32[] contexts]): the results are the second half
            arrays = [b for b, t in zip(sizes, _SHAPE.findall(result)) if t[1]]
            arrays = arrays or sizes
            nbytes = sum(arrays[len(arrays) // 2:]) if len(arrays) > 1 else arrays[0]
        elif kind == "reduce-scatter":
            nbytes = sum(sizes) * (group or 1)
        else:
            nbytes = sum(sizes)  # all-reduce / all-to-all may be tuples of combined operands
        promoted = bool(re.search(r"to_apply=%?[\w.\-]*promoted\b", rest))
        found.append(Collective(kind, nbytes, group, computation, computation in loop_bodies,
                                promoted))
    return found


def totals(ops: list[Collective]) -> dict[str, int]:
    """Bytes per kind (every kind present, 0 if none), 'total', and 'promoted' (the part of
    the total in reductions the backend widened, see Collective.promoted)."""
    out = {k: 0 for k in KINDS}
    for op in ops:
        out[op.kind] += op.bytes
    out["total"] = sum(out[k] for k in KINDS)
    out["promoted"] = sum(op.bytes for op in ops if op.promoted)
    return out
