r"""Paired differences BETWEEN runs of one evaluation (eval.py's --baseline pairs methods
within a run; this pairs runs).

Runs of one experiment that share their data config score the same held-out stream with the
same masked places (posjax/data/heldout.py, one seed), so at each length their cells hold the
same rows: `a - b` is then paired over those rows' documents (intervals.paired), as within a run.
Cells whose rows differ (another corpus, tokenizer or held-out split) are refused, never paired.

    python -m posjax.evaluation.report.run_differences results/<experiment> \
        --pairs=modern:rope,modern:alibi,rope:alibi --methods=as_is

writes DIR/run_differences.md (accuracy and loss, a - b [95% interval] per length).
"""

from __future__ import annotations

import os

from absl import app, flags

from posjax.evaluation.stats import intervals
from posjax.evaluation.report import report
from posjax.evaluation.results import results_file

flags.DEFINE_list("pairs", None, "a:b run-name pairs (a minus b).")
flags.DEFINE_list("methods", ["as_is"], "Method labels (results.json 'label') to pair, "
                  "e.g. as_is,yarn: a's and b's cell of the same label and length.")
flags.DEFINE_integer("seed", 0, "Bootstrap seed (the evaluator's default).")


def cell_index(results: dict) -> dict:
    """(run name, label, length) -> cell, for the evaluated cells that kept their rows."""
    out = {}
    for c in results["cells"].values():
        if c["status"] == "ok" and "rows" in c:
            out[(c["run"], c["label"], int(c["length"]))] = c
    return out


def differences(results: dict, pairs: list, labels: list, seed: int = 0) -> list[dict]:
    """One record per (pair, label, length) where both cells exist: a - b paired over the same
    rows (ValueError from intervals.paired when the rows differ)."""
    cells = cell_index(results)
    lengths = sorted({length for (_, _, length) in cells})
    out = []
    for a, b in pairs:
        for label in labels:
            for length in lengths:
                ca, cb = cells.get((a, label, length)), cells.get((b, label, length))
                if ca is None or cb is None:
                    continue
                if ca["rows"]["cluster"] != cb["rows"]["cluster"]:
                    raise ValueError(f"{a} and {b} at {length} scored different documents: "
                                     "not the same held-out stream, nothing to pair")
                d = intervals.paired(ca["rows"], cb["rows"], seed=seed)
                out.append(dict(d, a=a, b=b, label=label, length=length,
                                a_accuracy=ca["overall"]["accuracy"],
                                b_accuracy=cb["overall"]["accuracy"]))
    return out


def to_markdown(records: list[dict]) -> str:
    lengths = sorted({r["length"] for r in records})
    lines = ["# Paired differences between runs", "",
             "Same rows and masked tokens for both runs of a pair; a - b [the interval over "
             f"the rows' documents; {report.intervals_words(records)}].", ""]
    for metric in ("accuracy", "loss"):
        lines += [f"{metric}, a minus b:", "",
                  "| a - b | method | " + " | ".join(str(n) for n in lengths) + " |",
                  "|---|---|" + "---:|" * len(lengths)]
        rows: dict = {}
        for r in records:
            rows.setdefault((r["a"], r["b"], r["label"]), {})[r["length"]] = (
                f"{r[metric]:+.4f} [{r[metric + '_lo']:+.4f}, {r[metric + '_hi']:+.4f}]")
        for (a, b, label), by_length in rows.items():
            lines.append(f"| {a} - {b} | {label} | "
                         + " | ".join(by_length.get(n, "") for n in lengths) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        raise app.UsageError("one argument: the eval.py --out directory")
    pairs = []
    for p in flags.FLAGS.pairs or []:
        a, sep, b = p.partition(":")
        if not sep or not a or not b:
            raise app.UsageError(f"--pairs={p} is not allowed: a:b (two run names)")
        pairs.append((a, b))
    results = results_file.load(argv[1])
    records = differences(results, pairs, flags.FLAGS.methods, flags.FLAGS.seed)
    text = to_markdown(records)
    with open(os.path.join(argv[1], "run_differences.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    app.run(main)
