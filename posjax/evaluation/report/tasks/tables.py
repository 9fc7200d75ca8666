"""tasks.md and tasks.csv: the task cells of results.json as tables, every number with its
95% interval. Retrieval tasks: exact match of the whole answer and per-token accuracy, per
depth and overall; longdoc: MLM accuracy and loss per position bucket."""

from __future__ import annotations

import csv
import functools
import io

from posjax import storage
from posjax.evaluation.stats import intervals
from posjax.evaluation.report import report
from posjax.evaluation.results import results_file
from posjax.evaluation.derive import seeds as seeds_lib
from posjax.evaluation.derive import task_pairs as paired

CSV_FIELDS = ("run", "scheme", "trained_length", "task", "method", "label", "length",
              "depth", "bucket", "status", "rows", "count", "exact", "exact_lo", "exact_hi",
              "digit_accuracy", "digit_accuracy_lo", "digit_accuracy_hi", "accuracy",
              "accuracy_lo", "accuracy_hi", "loss", "loss_lo", "loss_hi", "distance", "reason")


_ci = functools.partial(results_file.interval_text, digits=3, missing="n/a")


def headline(c: dict) -> str:
    o = c["overall"]
    if c["task"] == "longdoc":
        return f"acc {_ci(o, 'accuracy')}  loss {_ci(o, 'loss')}"
    return f"exact {_ci(o, 'exact')}  per-token {_ci(o, 'digit_accuracy')}"


def task_cells(results: dict, grouped: bool = False, ordered: bool = True) -> list[dict]:
    """The task cells; `grouped`: each seed group of several runs as one cell (the mean over
    its seeds, posjax.evaluation.derive.seeds.grouped_tasks) in place of its runs' cells;
    `ordered`: in table order (methods in the registry's order, which imports JAX)."""
    cells = list((seeds_lib.grouped_tasks(results) if grouped
                  else results_file.section(results, "tasks")).values())
    if not ordered:
        return cells
    return sorted(cells, key=lambda c: (c["task"], c["run"], results_file.method_order(c),
                                        c["length"]))


def to_csv(results: dict) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n",
                            extrasaction="ignore")
    writer.writeheader()
    for c in task_cells(results):
        base = {k: c[k] for k in ("run", "scheme", "trained_length", "task", "method",
                                  "label", "length", "status", "reason") if k in c}
        if c["status"] != "ok":
            writer.writerow(base)
            continue
        writer.writerow(dict(base, depth="all", bucket="all", **c["overall"]))
        if c["task"] == "longdoc":  # by position; a retrieval task: by depth
            for b in c["buckets"]:
                writer.writerow(dict(base, depth="all", **b))
            continue
        for d in c["depths"]:
            pick = [i for i, x in enumerate(c["rows"]["depth"]) if x == d["depth"]]
            dist = sorted(c["rows"]["distance"][i] for i in pick)
            writer.writerow(dict(base, **d, bucket="all", distance=dist[len(dist) // 2]))
    return buf.getvalue()


def to_markdown(results: dict) -> str:
    lines = ["# Tasks", "", "Retrieval: exact match of the whole answer [95% interval: Wilson "
             "for one training seed; for several, the mean over seeds with the method in the "
             "interval column], and per-token accuracy [95% interval over rows: bootstrap over "
             f">= {intervals.MIN_CLUSTERS} rows, else jackknife with t quantiles]; paired "
             "differences of exact "
             "match: Newcombe's paired score interval. longdoc: MLM accuracy inside single "
             "documents [95% interval over documents, its method in each row]. The seeds "
             "column says how many training seeds each cell averages.", ""]
    by_task: dict = {}
    for c in task_cells(results, grouped=True):
        by_task.setdefault(c["task"], []).append(c)
    for task, cells in by_task.items():
        lines += [f"## {task}", ""]
        if task == "longdoc":
            lines += ["| run | seeds | method | L | accuracy | loss | interval | by position |",
                      "|---|---|---|---|---|---|---|---|"]
            for c in cells:
                if c["status"] != "ok":
                    lines.append(f"| {c['run']} | {_seeds(c)} | {c['label']} | {c['length']} "
                                 f"| n/a | n/a | | {c['reason']} |")
                    continue
                parts = "; ".join(f"{b['bucket']}: {_ci(b, 'accuracy')}" for b in c["buckets"])
                lines.append(f"| {c['run']} | {_seeds(c)} | {c['label']} | {c['length']} | "
                             f"{_ci(c['overall'], 'accuracy')} | {_ci(c['overall'], 'loss')} | "
                             f"{c['overall']['interval']} | {parts} |")
        else:
            depths = sorted({d["depth"] for c in cells if c["status"] == "ok"
                             for d in c["depths"]})
            lines += ["| run | seeds | method | L | exact | interval | per-token | " + " | ".join(
                f"exact @ depth {d:g}" for d in depths) + " |",
                "|---" * (7 + len(depths)) + "|"]
            for c in cells:
                if c["status"] != "ok":
                    lines.append(f"| {c['run']} | {_seeds(c)} | {c['label']} | {c['length']} "
                                 f"| n/a ({c['reason']}) | | |" + " |" * len(depths))
                    continue
                at = {d["depth"]: d for d in c["depths"]}
                lines.append(f"| {c['run']} | {_seeds(c)} | {c['label']} | {c['length']} | "
                             f"{_ci(c['overall'], 'exact')} | "
                             f"{c['overall']['interval']} | "
                             f"{_ci(c['overall'], 'digit_accuracy')} | "
                             + " | ".join(_ci(at[d], "exact") if d in at else "" for d in depths)
                             + " |")
        lines.append("")
    lines += _differences_markdown(results)
    return "\n".join(lines)


def _seeds(c: dict) -> str:
    return results_file.seeds_words(*results_file.cell_seeds(c))


def _differences_markdown(results: dict) -> list[str]:
    baseline = results["settings"].get("baseline")
    diffs = paired.differences(results, baseline)
    lines = []
    for task in sorted({d["task"] for d in diffs}):
        names = paired.LONGDOC_METRICS if task == "longdoc" else paired.RETRIEVAL_METRICS
        heads = {"exact": "exact", "digit_accuracy": "per-token", "accuracy": "accuracy",
                 "loss": "loss"}
        lines += [f"## {task}: minus {baseline} (paired, same rows, 1 seed; "
                  + ("intervals over documents" if task == "longdoc" else
                     f"exact: {intervals.NEWCOMBE}; per-token: over rows") + ")", "",
                  "| run | method | L | " + " | ".join(heads[n] for n in names) + " |",
                  "|---|---|---|" + "---|" * len(names)]
        for d in (d for d in diffs if d["task"] == task):
            lines.append(f"| {d['run']} | {d['label']} | {d['length']} | "
                         + " | ".join(_ci(d, n, signed=True) for n in names) + " |")
        lines.append("")
    return lines


def write(out_dir: str, results: dict) -> None:
    report.atomic_write(storage.join(out_dir, "tasks.csv"), to_csv(results))
    report.atomic_write(storage.join(out_dir, "tasks.md"), to_markdown(results))
