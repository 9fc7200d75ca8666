"""results.json: its name and schema, and the small readers of its cells that every writer of
it shares (the tables in posjax.evaluation.report, the recovery section, the plots)."""

from __future__ import annotations

from typing import Optional

SCHEMA = "posjax.extrapolation/2"
OLD_SCHEMAS = ("posjax.extrapolation/1",)
RESULTS = "results.json"


def is_ok(c: Optional[dict]) -> bool:
    """Whether cell `c` was evaluated (status ok, with rows)."""
    return c is not None and c.get("status") == "ok" and "rows" in c


def method_order(c: dict) -> tuple:
    """Sort key of a cell: methods in posjax.evaluation.methods order, then their params."""
    from posjax.evaluation.methods import METHODS  # imports jax: only when cells are sorted

    m = c["method"]
    return (METHODS.index(m) if m in METHODS else 99, c["params"].get("alpha") or 0,
            bool(c["params"].get("logn")), bool(c["params"].get("shuffle_positions")))


def run_of(key: str) -> str:
    """The run part of a cell key ('<run>|<variant>|L=<length>...')."""
    return key.partition("|")[0]


def recovery_runs(results: dict) -> set:
    """Run keys of continued-training checkpoints (shown in the recovery table only)."""
    out = set()
    for curve in results.get("recovery", {}).values():
        for step, key in curve["cells"].items():
            if int(step) > 0:
                out.add(run_of(key))
    return out


def ci(d: dict, name: str, signed: bool = False) -> str:
    """`name` with its interval, '0.1234 [0.1200, 0.1268]'; '' where not measured."""
    sign = "+" if signed else ""
    return (f"{d[name]:{sign}.4f} [{d[name + '_lo']:{sign}.4f}, {d[name + '_hi']:{sign}.4f}]"
            if d.get(name) is not None else "")
