"""95% intervals for extrapolation results written before the evaluator kept per-row sums.

Those results.json files hold, per cell, only the number of scored tokens and how many were
right, so the row bootstrap that the evaluator now uses cannot be run on them. This writes
`intervals.md` beside each file with

  - a Wilson interval for every cell's accuracy, and
  - Newcombe's interval for the difference between two cells at one length: every method
    against the run's as_is (or truncate), each `+logn` against the same method without it,
    every run's as_is against NoPE's, and a continued-training run `<parent>_...` against
    each zero-shot method of its parent.

Both treat the masked tokens as independent draws. Tokens of one row share their text, so
the true uncertainty is LARGER than these intervals; they are lower bounds, to tell which old
statements were noise, not confirmations. New results carry bootstrap intervals over rows.

    python -m posjax.evaluation.legacy_intervals FOLDER [FOLDER ...]
"""

from __future__ import annotations

import json
import math
import os
import sys

from posjax.evaluation import intervals


def wilson(correct: int, n: int) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (intervals.wilson's, without the estimate)."""
    return intervals.wilson(correct, n)[1:]


def newcombe(c1: int, n1: int, c2: int, n2: int) -> tuple[float, float]:
    """Newcombe's hybrid score interval of p1 - p2 for two independent proportions."""
    p1, p2 = c1 / n1, c2 / n2
    l1, u1 = wilson(c1, n1)
    l2, u2 = wilson(c2, n2)
    d = p1 - p2
    return (d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2),
            d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2))


def _cells(path: str) -> list[dict]:
    with open(path) as f:
        data = json.load(f)
    cells = [c for c in data["cells"].values() if c.get("status") == "ok"]
    return sorted(cells, key=lambda c: (c["run"], c["length"], c["label"]))


def _verdict(lo: float, hi: float) -> str:
    return "no measurable difference" if lo <= 0 <= hi else ("higher" if lo > 0 else "lower")


def report(folder: str) -> str:
    cells = _cells(os.path.join(folder, "results.json"))
    lines = [f"# 95% intervals for {os.path.basename(folder.rstrip('/'))} (binomial lower bounds)",
             "", "Written by `python -m posjax.evaluation.legacy_intervals`. Wilson intervals treat masked",
             "tokens as independent; tokens of one row share their text, so true intervals are",
             "wider. A difference whose interval holds 0 is 'no measurable difference'.", "",
             "| run | method | L | scored | accuracy | 95% interval |", "|---|---|---:|---:|---:|---|"]
    for c in cells:
        o = c["overall"]
        lo, hi = wilson(o["correct"], o["count"])
        lines.append(f"| {c['run']} | {c['label']} | {c['length']} | {o['count']} | "
                     f"{o['accuracy']:.4f} | [{lo:.4f}, {hi:.4f}] |")
    lines += ["", "## Differences", "",
              "| run | L | method | minus | difference | 95% interval | reading |",
              "|---|---:|---|---|---:|---|---|"]
    by_key: dict = {}
    for c in cells:
        by_key.setdefault((c["run"], c["length"]), []).append(c)
    none = {c["length"]: c for c in cells if c["run"] == "none" and c["label"] == "as_is"}
    pairs = []
    for (run, length), group in sorted(by_key.items()):
        first = next((c for c in group if c["label"] in ("as_is", "truncate")), group[0])
        pairs += [(c, first) for c in group if c is not first]
        if length in none and run != "none":
            pairs += [(c, none[length]) for c in group if c["label"] == "as_is"]
        labels = {c["label"]: c for c in group}
        pairs += [(c, labels[c["label"][:-5]]) for c in group
                  if c["label"].endswith("+logn") and c["label"][:-5] in labels
                  and labels[c["label"][:-5]] is not first]
        # a continued-training run (named <parent>_...) against its parent's zero-shot cells
        for (parent, plen), pgroup in by_key.items():
            if plen == length and run.startswith(parent + "_"):
                pairs += [(c, p) for c in group if c["label"] == "as_is" for p in pgroup]
    for a, b in pairs:
        oa, ob = a["overall"], b["overall"]
        lo, hi = newcombe(oa["correct"], oa["count"], ob["correct"], ob["count"])
        minus = b["label"] if b["run"] == a["run"] else f"{b['run']} {b['label']}"
        lines.append(f"| {a['run']} | {a['length']} | {a['label']} | {minus} | "
                     f"{oa['accuracy'] - ob['accuracy']:+.4f} | [{lo:+.4f}, {hi:+.4f}] | "
                     f"{_verdict(lo, hi)} |")
    return "\n".join(lines) + "\n"


USAGE = ("usage: python -m posjax.evaluation.legacy_intervals FOLDER [FOLDER ...]  (folders "
         "holding a schema-1 results.json, written before the evaluator kept per-row sums)")


def main(folders: list[str]) -> int:
    if not folders or any(f in ("-h", "--help") for f in folders):
        sys.stderr.write(USAGE + "\n")
        return 0 if folders else 2
    missing = [f for f in folders if not os.path.isfile(os.path.join(f, "results.json"))]
    if missing:
        sys.stderr.write(f"legacy_intervals: error: folder={missing[0]} is not allowed: a "
                         f"folder holding a results.json\n")
        return 2
    for folder in folders:
        text = report(folder)
        with open(os.path.join(folder, "intervals.md"), "w") as f:
            f.write(text)
        print(f"wrote {os.path.join(folder, 'intervals.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
