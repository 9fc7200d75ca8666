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
differences (posjax.evaluation.derive.algorithmic; --rewrite rewrites its own tables).
results.json is read through its typed record (posjax.evaluation.results.results_file.load: older
files are migrated there). Files written before the seed groups (schema 2 without
'seed_cells') are derived on the fly from their per-row sums, each run a 1-seed group.
With --rewrite, DIR's results.md, results.csv, tasks.md/.csv (when it has task cells), the
recovery answer (recovery_answer.md/.json and recovery_seeds.png, when it has curves) and
figures are rewritten from results.json under today's interval rule, and results.json gains
the derived sections (its per-row sums are kept as they are): what a folder written by an
older evaluator needs so that its tables and the summary agree.
Exit 2 with one line when DIR or its results.json is missing or not a results file.
"""

from __future__ import annotations

import functools
import sys

from posjax.config.cli import fail
from posjax.evaluation import derive
from posjax.evaluation.report import plots, recovery_seeds, report
from posjax.evaluation.results import results_file
from posjax.evaluation.derive import algorithmic as algorithmic_derive
from posjax.evaluation.report.algorithmic import output as algorithmic_output
from posjax.evaluation.report.algorithmic import tables as algorithmic_tables
from posjax.evaluation.results.record import Results
from posjax.evaluation.report.tasks import plots as task_plots
from posjax.evaluation.report.tasks import tables

section = results_file.section


def load(out_dir: str) -> Results:
    """The record of `out_dir` with its derived sections; exits 2 on a bad folder."""
    try:
        results = results_file.load(out_dir)
    except results_file.ResultsFileError as e:
        fail(str(e))
    if "seed_cells" not in results or (section(results, "algorithmic")
                                       and algorithmic_derive.SCORES not in results):
        derive.derive(results, derive.recorded_baseline(results))  # written mid-sweep
    return results


_ci = functools.partial(results_file.interval_text, missing="n/a")


def _seeds(d: dict) -> str:
    return results_file.seeds_words(*results_file.cell_seeds(d))


def _methods(d: dict) -> str:
    """The interval method; both when accuracy's and loss's differ."""
    acc, loss = d["accuracy_interval"], d["loss_interval"]
    return acc if loss == acc else f"accuracy: {acc}; loss: {loss}"


def _not_applicable(cells: list[dict], show_all: bool) -> list[str]:
    """One line per (run, method) with not-applicable cells (with --all), else their count."""
    na = [c for c in cells if c["status"] != "ok"]
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


def lines(results: Results, folder: str = "", show_all: bool = False) -> list[str]:
    """The summary of `results` (of results folder `folder`); not-applicable cells hidden
    unless `show_all`."""
    experiment = results["settings"].get("experiment")
    out = [f"# {folder.rstrip('/') + '/' if folder else ''}{results_file.RESULTS}"
           + (f" (experiment {experiment})" if experiment else "")]
    cells = sorted(section(results, "seed_cells").values(),
                   key=lambda c: (c["run"], c["length"], c["label"]))
    if cells or not section(results, "algorithmic"):  # an algorithmic folder: no MLM cells
        out += ["", "## cells (mean over seeds)", "",
                "| run | method | L | accuracy | loss | seeds | clusters | interval |",
                "|---|---|---:|---|---|---|---:|---|"]
    for c in cells:
        if c["status"] != "ok":
            continue
        o = c["overall"]
        out.append(f"| {c['run']} | {c['label']} | {c['length']} | {_ci(o, 'accuracy')} | "
                   f"{_ci(o, 'loss')} | {_seeds(c)} | {o['clusters']} | "
                   f"{_methods(o)} |")
    out += _not_applicable(cells, show_all)
    reliance = section(results, "reliance")
    if reliance:
        out += ["", "## position reliance (accuracy intact - shuffled, at the training length)",
                "", "| run | L | accuracy | loss | seeds | interval |", "|---|---:|---|---|---|---|"]
        for r in sorted(reliance.values(), key=lambda r: r["run"]):
            out.append(f"| {r['run']} | {r['length']} | {_ci(r, 'accuracy', True)} | "
                       f"{_ci(r, 'loss', True)} | {_seeds(r)} | {_methods(r)} |")
    diffs = sorted(section(results, "differences").values(),
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
    if section(results, "tasks"):
        out += ["", "## task cells", "",
                "| run | task | method | L | exact | per-token | seeds | interval |",
                "|---|---|---|---:|---|---|---|---|"]
        for c in sorted(tables.task_cells(results, grouped=True, ordered=False),
                        key=lambda c: (c["task"], c["run"], c["length"], c["label"])):
            if c["status"] != "ok":
                out.append(f"| {c['run']} | {c['task']} | {c['label']} | {c['length']} | "
                           f"n/a | n/a | {_seeds(c)} | {c['reason']} |")
                continue
            o = c["overall"]
            head = ((_ci(o, "accuracy"), _ci(o, "loss")) if c["task"] == "longdoc"
                    else (_ci(o, "exact"), _ci(o, "digit_accuracy")))
            out.append(f"| {c['run']} | {c['task']} | {c['label']} | {c['length']} | "
                       f"{head[0]} | {head[1]} | {_seeds(c)} | {o['interval']} |")
    if section(results, "algorithmic"):
        out += algorithmic_tables.summary_lines(results)
    return out


def rewrite(out_dir: str, results: Results) -> list[str]:
    """Rewrite out_dir's tables and figures from `results`; returns the files written."""
    if section(results, "algorithmic"):  # an algorithmic folder: its own tables and figures
        return algorithmic_output.write(out_dir, results)
    report.write_tables(out_dir, results)
    written = [results_file.RESULTS, "results.csv", "results.md"]
    figures = plots.write_plots(out_dir, results)
    if section(results, "tasks"):
        tables.write(out_dir, results)
        written += ["tasks.csv", "tasks.md"]
        figures += task_plots.write_all(out_dir, results)
    if section(results, "recovery") and recovery_seeds.write(out_dir, results):
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
