"""results.json: its name and schema, and the small readers of its cells that every writer of
it shares (the tables in posjax.evaluation.report, the recovery section, the plots), so none of
them imports another to read a cell."""

from __future__ import annotations

from typing import Optional

SCHEMA = "posjax.extrapolation/2"
OLD_SCHEMAS = ("posjax.extrapolation/1",)
RESULTS = "results.json"


def has_rows(c: Optional[dict]) -> bool:
    """An evaluated cell (status ok) that kept its per-row sums, which intervals need."""
    return c is not None and c.get("status") == "ok" and "rows" in c


def method_order(c: dict) -> tuple:
    """A cell's place among its run's methods in tables and figures: the registry's order."""
    from posjax.evaluation.methods import METHODS  # imports JAX: only when tables sort

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


def interval_seed(results: dict) -> int:
    """The seed of the evaluation's bootstrap draws: settings.seed, 0 where absent."""
    return int((results.get("settings") or {}).get("seed") or 0)


IDENTICAL = "identical (same scores)"


def interval_text(d: Optional[dict], name: str, signed: bool = False, digits: int = 4,
                  missing: str = "") -> str:
    """'est [lo, hi]' of d[name], d[name_lo], d[name_hi]; `missing` where d has no interval;
    'identical' for a paired difference of two cells that scored every token alike (no
    interval: it is exactly 0)."""
    if not d or d.get(name) is None or d.get(f"{name}_lo") is None:
        return missing
    if d.get("identical"):
        return IDENTICAL
    f = f"{'+' if signed else ''}.{digits}f"
    return f"{d[name]:{f}} [{d[name + '_lo']:{f}}, {d[name + '_hi']:{f}}]"


def seeds_words(n: int, seeds=()) -> str:
    """'1 seed' / '3 seeds (0, 1, 2)' ('3 seeds' without the list): every table and figure
    says how many training seeds it averages."""
    if n == 1:
        return "1 seed"
    return f"{n} seeds" + (f" ({', '.join(str(x) for x in seeds)})" if seeds else "")
