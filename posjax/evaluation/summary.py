r"""Print a results folder's numbers from its results.json alone (no model, no JAX):

    python -m posjax.evaluation.summary DIR
    python -m posjax.evaluation.summary DIR --all       # not-applicable cells too
    python -m posjax.evaluation.summary DIR --rewrite   # and rewrite DIR's tables and figures

It opens with the folder's name. One line per evaluated table cell (each group of seeds x
method x length: the mean over seeds, its 95% interval, n_seeds, clusters and the interval's
method); not-applicable cells are counted (with --all: one line per run and method, its
lengths and reason), then every stored paired difference
(baseline, method and run pairs, paired by seed and token) with its interval, then the task
cells when there are any, then an algorithmic folder's scores and randomized-minus-plain
differences (posjax.evaluation.algorithmic; --rewrite rewrites its own tables). Files written before the seed groups (schema 2 without
'seed_cells') are derived on the fly from their per-row sums, each run a 1-seed group, and
retrieval task cells (overall and per depth) without a named interval get today's (Wilson)
from their rows.
With --rewrite, DIR's results.md, results.csv, tasks.md/.csv (when it has task cells), the
recovery answer (recovery_answer.md/.json and recovery_seeds.png, when it has curves) and
figures are rewritten from results.json under today's interval rule, and results.json gains
the derived sections (its per-row sums are kept as they are): what a folder written by an
older evaluator needs so that its tables and the summary agree.
Exit 2 with one line when DIR or its results.json is missing or not a results file.
"""

from __future__ import annotations

import functools
import json
import sys

from posjax import storage
from posjax.cli import fail
from posjax.evaluation import plots, recovery_seeds, report
from posjax.evaluation.algorithmic import derive as algorithmic_derive
from posjax.evaluation.algorithmic import output as algorithmic_output
from posjax.evaluation.algorithmic import tables as algorithmic_tables
from posjax.evaluation.tasks import plots as task_plots
from posjax.evaluation.tasks import scoring, tables


def load(out_dir: str) -> dict:
    """The results dict of `out_dir` with its derived sections; exits 2 on a bad folder."""
    path = storage.join(out_dir, report.RESULTS)
    if not storage.exists(path):
        fail(f"{out_dir} holds no {report.RESULTS}: give a folder eval.py --out wrote")
    try:
        results = json.loads(storage.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError) as e:
        fail(f"{path} is not readable JSON ({type(e).__name__}): rerun eval.py --out={out_dir}")
    schema = results.get("schema") if isinstance(results, dict) else None
    if schema != report.SCHEMA:
        fix = ("it predates per-row sums and intervals: rerun eval.py on its workdirs"
               if schema in report.OLD_SCHEMAS else
               f"expected {report.SCHEMA!r}")
        fail(f"{path} has schema {schema!r}: {fix}")
    if "seed_cells" not in results or not isinstance(results.get("cells"), dict):
        results.setdefault("cells", {})
        report.derive(results, results.get("settings", {}).get("baseline"),
                      report.interval_seed(results))
    if results.get("algorithmic") and algorithmic_derive.SCORES not in results:
        algorithmic_derive.derive(results)
    for c in results.get("tasks", {}).values():  # cells written before their intervals' names
        if c.get("status") == "ok" and c.get("task") != "longdoc" and "rows" in c \
                and "interval" not in c.get("overall", {}):
            c["overall"] = scoring.summary(c["rows"], seed=report.interval_seed(results))
        if c.get("status") == "ok" and "depth" in c.get("rows", {}) \
                and any("interval" not in d for d in c.get("depths", [])):
            c["depths"] = scoring.by_depth(c["rows"], c["rows"]["depth"],
                                           seed=report.interval_seed(results))
    return results


_ci = functools.partial(report.interval_text, missing="n/a")


def _seeds(d: dict) -> str:
    return report.seeds_words(d.get("n_seeds", 1), d.get("seeds", []))


def _methods(d: dict) -> str:
    """The interval method; both when accuracy's and loss's differ."""
    acc, loss = d.get("accuracy_interval", d.get("interval", "")), d.get("loss_interval")
    return acc if loss in (None, acc) else f"accuracy: {acc}; loss: {loss}"


def _not_applicable(cells: list[dict], show_all: bool) -> list[str]:
    """One line per (run, method) with not-applicable cells (with --all), else their count."""
    na = [c for c in cells if c.get("status") != "ok"]
    if not na:
        return []
    if not show_all:
        pairs = len({(c["run"], c["label"]) for c in na})
        return ["", f"{len(na)} not-applicable cells of {pairs} (run, method) pairs hidden "
                "(--all lists them with their reasons)"]
    out = ["", "## not applicable (one line per run and method)", ""]
    by_run: dict = {}
    for c in cells:
        by_run.setdefault(c["run"], []).append(c)
    for run, mine in by_run.items():
        found = report.not_applicable_lines(mine)
        out += [f"{run}:"] + ["  " + line for line in found] if found else []
    return out


def lines(results: dict, folder: str = "", show_all: bool = False) -> list[str]:
    """The summary of `results` (of results folder `folder`); not-applicable cells hidden
    unless `show_all`."""
    experiment = results.get("settings", {}).get("experiment")
    out = [f"# {folder.rstrip('/') + '/' if folder else ''}{report.RESULTS}"
           + (f" (experiment {experiment})" if experiment else "")]
    cells = sorted(results.get("seed_cells", {}).values(),
                   key=lambda c: (c["run"], c["length"], c["label"]))
    if cells or not results.get("algorithmic"):  # an algorithmic folder has no MLM cells
        out += ["", "## cells (mean over seeds)", "",
                "| run | method | L | accuracy | loss | seeds | clusters | interval |",
                "|---|---|---:|---|---|---|---:|---|"]
    for c in cells:
        if c.get("status") != "ok":
            continue
        o = c["overall"]
        out.append(f"| {c['run']} | {c['label']} | {c['length']} | {_ci(o, 'accuracy')} | "
                   f"{_ci(o, 'loss')} | {_seeds(c)} | {o.get('clusters', '')} | "
                   f"{_methods(o)} |")
    out += _not_applicable(cells, show_all)
    reliance = results.get("reliance", {})
    if reliance:
        out += ["", "## position reliance (accuracy intact - shuffled, at the training length)",
                "", "| run | L | accuracy | loss | seeds | interval |", "|---|---:|---|---|---|---|"]
        for r in sorted(reliance.values(), key=lambda r: r["run"]):
            out.append(f"| {r['run']} | {r['length']} | {_ci(r, 'accuracy', True)} | "
                       f"{_ci(r, 'loss', True)} | {_seeds(r)} | {_methods(r)} |")
    diffs = sorted(results.get("differences", {}).values(),
                   key=lambda d: (d["kind"], d["a_run"], d["length"], d["a_label"], d["b_run"],
                                  d["b_label"]))
    if diffs:
        out += ["", "## paired differences (a - b, paired by seed and token)", "",
                "| kind | a | b | L | accuracy | loss | seeds | interval |",
                "|---|---|---|---:|---|---|---|---|"]
        for d in diffs:
            out.append(f"| {d['kind']} | {d['a_run']} {d['a_label']} | {d['b_run']} "
                       f"{d['b_label']} | {d['length']} | {_ci(d, 'accuracy', True)} | "
                       f"{_ci(d, 'loss', True)} | {_seeds(d)} | {_methods(d)} |")
    tasks = results.get("tasks", {})
    if tasks:
        out += ["", "## task cells", "",
                "| run | task | method | L | exact | per-token | seeds | interval |",
                "|---|---|---|---:|---|---|---|---|"]
        for c in sorted(tables.task_cells(results, grouped=True, ordered=False),
                        key=lambda c: (c["task"], c["run"], c["length"], c["label"])):
            o = c.get("overall", {})
            head = ((_ci(o, "accuracy"), _ci(o, "loss")) if c["task"] == "longdoc"
                    else (_ci(o, "exact"), _ci(o, "digit_accuracy")))
            out.append(f"| {c['run']} | {c['task']} | {c['label']} | {c['length']} | "
                       f"{head[0]} | {head[1]} | {_seeds(c)} | "
                       f"{o.get('interval', c.get('reason', ''))} |")
    if results.get("algorithmic"):
        out += algorithmic_tables.summary_lines(results)
    return out


def rewrite(out_dir: str, results: dict) -> list[str]:
    """Rewrite out_dir's tables and figures from `results`; returns the files written."""
    if results.get("algorithmic"):  # an algorithmic folder: its own tables and figures
        return algorithmic_output.write(out_dir, results)
    report.write_tables(out_dir, results)
    written = [report.RESULTS, "results.csv", "results.md"]
    figures = plots.write_plots(out_dir, results)
    if results.get("tasks"):
        tables.write(out_dir, results)
        written += ["tasks.csv", "tasks.md"]
        figures += task_plots.write_all(out_dir, results)
    if results.get("recovery") and recovery_seeds.write(out_dir, results):
        written += [recovery_seeds.ANSWER_JSON, recovery_seeds.ANSWER_MD]
        figures.append(recovery_seeds.FIGURE)
    return written + [p.rsplit("/", 1)[-1] for p in figures]


def main(argv: list[str]) -> None:
    args = argv[1:]
    write, show_all = "--rewrite" in args, "--all" in args
    rest = [a for a in args if a not in ("--rewrite", "--all")]
    if len(rest) != 1 or rest[0].startswith("-"):
        fail("usage: python -m posjax.evaluation.summary DIR [--all] [--rewrite] "
             "(DIR: a folder eval.py --out wrote)")
    results = load(rest[0])
    print("\n".join(lines(results, rest[0], show_all)))
    if write:
        print(f"\nrewrote in {rest[0]}: " + ", ".join(rewrite(rest[0], results)))


if __name__ == "__main__":
    main(sys.argv)
