"""results.md and results.csv of an algorithmic results folder, and the lines
`python -m posjax.evaluation.summary` prints for it, from results.json's derived sections
(posjax.evaluation.derive.algorithmic): every number with its 95% interval and its seeds.

results.md: the settings; a task x encoding table of the score over the test lengths (plain
and randomized, each the mean over seeds); the randomized-minus-plain differences per task
and averaged over tasks (paired by seed and sequence); the same at the training lengths when
they were scored (a model that has not learned the task says nothing about length).
results.csv: one line per seed cell (group x length) and per paired difference at a length.
"""

from __future__ import annotations

import csv
import functools
import io

from posjax import storage
from posjax.evaluation.report import report
from posjax.evaluation.derive import algorithmic as derive
from posjax.evaluation.results.record import Results
from posjax.evaluation.results.results_file import interval_text, section, seeds_words

_ci = functools.partial(interval_text, digits=3, missing="n/a")
CSV_FIELDS = ("kind", "run", "task", "scheme", "randomized", "test_positions", "dropout",
              "length", "n_seeds", "seeds", "clusters", "accuracy", "accuracy_lo",
              "accuracy_hi", "loss", "loss_lo", "loss_hi", "interval", "status", "reason")


def _seeds(d: dict) -> str:
    return seeds_words(d["n_seeds"], d["seeds"])


def _tasks(d: dict) -> str:
    n = len(d["tasks"])
    return f"{n} task{'s' if n != 1 else ''}"


def _span(lengths: list) -> str:
    if not lengths:
        return "none"
    step = sorted({b - a for a, b in zip(lengths, lengths[1:])})
    every = "" if len(lengths) < 3 else (f", every {step[0]}" if len(step) == 1 else
                                          f", {len(lengths)} lengths")
    return f"{lengths[0]}..{lengths[-1]}{every}"


def _settings_words(results: Results) -> str:
    s = results["settings"]
    dropout = s.get("test_dropout")
    return (f"{s.get('sequences')} test sequences per length (the same for every run, seed "
            f"{s.get('seed')}); dropout {'on at evaluation (the reference)' if dropout else 'off'}"
            f"; test positions: "
            + ("randomized runs randomized (the reference), plain runs 0..n-1"
               if s.get("test_positions") == "reference" else "0..n-1 for every run"))


def _score_table(results: Results, which: str) -> list[str]:
    scores = [d for d in section(results, derive.SCORES).values() if d["range"] == which]
    if not scores:
        return []
    tasks = sorted({d["task"] for d in scores})
    columns = sorted({(d["scheme"], d["randomized"]) for d in scores})
    head = [f"{s}{' randomized' if r else ''}" for s, r in columns]
    at = {(d["task"], d["scheme"], d["randomized"]): d for d in scores}
    lengths = sorted({n for d in scores for n in d["lengths"]})
    title = ("Score over the test lengths (longer than trained)" if which == "test"
             else "Accuracy at the training lengths")
    lines = [f"## {title}: mean accuracy over lengths {_span(lengths)}", "",
             "| task | " + " | ".join(head) + " |", "|---|" + "---|" * len(columns)]
    for task in tasks:
        cells = [at.get((task, s, r)) for s, r in columns]
        lines.append(f"| {task} | " + " | ".join(
            "" if d is None else f"{_ci(d, 'accuracy')} ({d['n_seeds']})" for d in cells) + " |")
    names = sorted({d["accuracy_interval"] for d in scores})
    return lines + ["", "(n): training seeds. 95% intervals: " + "; ".join(names), ""]


def _best_seed_table(results: Results) -> list[str]:
    """The papers' own statistic beside the means: each group's best seed's test score
    (Delétang et al. and Ruoss et al. report the best of 10 seeds x 3 learning rates; the best
    of fewer draws sits lower by construction, so it is read beside theirs, never ranked)."""
    scores = [d for d in section(results, derive.SCORES).values() if d["range"] == "test"
              and d["n_seeds"] > 1]
    if not scores:
        return []
    tasks = sorted({d["task"] for d in scores})
    columns = sorted({(d["scheme"], d["randomized"]) for d in scores})
    at = {(d["task"], d["scheme"], d["randomized"]): d for d in scores}

    def best(d: dict) -> str:
        per_seed = d["per_seed"]["accuracy"]
        i = max(range(len(per_seed)), key=per_seed.__getitem__)
        return f"{per_seed[i]:.3f} (seed {d['seeds'][i]} of {d['n_seeds']})"

    return ["## The papers' statistic: the best seed's score over the test lengths", "",
            "| task | " + " | ".join(f"{s}{' randomized' if r else ''}" for s, r in columns)
            + " |", "|---|" + "---|" * len(columns)] + [
        f"| {task} | " + " | ".join("" if at.get((task, s, r)) is None else best(at[task, s, r])
                                    for s, r in columns) + " |" for task in tasks] + [
        "", "The papers report the best of 10 seeds x 3 learning rates per cell; a best of "
        "fewer seeds sits lower by construction. Comparisons between encodings read the means "
        "above, with their intervals.", ""]


def _difference_table(results: Results, which: str) -> list[str]:
    diffs = [d for d in section(results, derive.DIFFERENCES).values()
             if d["kind"] == "range" and d["range"] == which]
    if not diffs:
        return []
    schemes = sorted({d["scheme"] for d in diffs})
    tasks = sorted({d["task"] for d in diffs})
    at = {(d["task"], d["scheme"]): d for d in diffs}
    avg = {d["scheme"]: d for d in section(results, derive.AVERAGES).values()
           if d["range"] == which}
    lines = [f"## Randomized minus plain, {'test' if which == 'test' else 'training'} "
             "lengths (paired by seed and sequence)", "",
             "| task | " + " | ".join(schemes) + " |", "|---|" + "---|" * len(schemes)]
    for task in tasks:
        lines.append(f"| {task} | " + " | ".join(
            _ci(at[(task, s)], "accuracy", True) + f" ({at[(task, s)]['n_seeds']})"
            if (task, s) in at else "" for s in schemes) + " |")
    lines.append("| mean over tasks | " + " | ".join(
        f"{_ci(avg[s], 'accuracy', True)} ({avg[s]['n_seeds']}; {_tasks(avg[s])})"
        if s in avg else "" for s in schemes) + " |")
    names = sorted({d["accuracy_interval"] for d in diffs + list(avg.values())})
    return lines + ["", "(n): training seeds. 95% intervals: " + "; ".join(names), ""]


def to_markdown(results: Results) -> str:
    s = results["settings"]
    lines = [f"# Algorithmic length generalization: {s.get('experiment') or ''}".rstrip(), "",
             "Per-token accuracy (the reference's masked accuracy) of each task's test "
             "sequences, the mean over training seeds; intervals resample seeds, then "
             "sequences (posjax.evaluation.stats.intervals). " + _settings_words(results) + ".", ""]
    for which in derive.RANGES:
        lines += _score_table(results, which) + _difference_table(results, which)
        if which == "test":
            lines += _best_seed_table(results)
    lines += ["Per-length numbers: results.csv and the figures accuracy_<task>.png, "
              "difference_<task>.png.", ""]
    return "\n".join(lines)


def to_csv(results: Results) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n",
                            extrasaction="ignore")
    writer.writeheader()
    for c in sorted(section(results, derive.SEED_CELLS).values(),
                    key=lambda c: (c["task"], c["run"], c["length"])):
        numbers = {k: c["overall"][k] for k in ("clusters", "accuracy", "accuracy_lo",
                                                 "accuracy_hi", "loss", "loss_lo", "loss_hi")
                   } if c["status"] == "ok" else {}
        writer.writerow(dict({k: c[k] for k in CSV_FIELDS if k in c}, kind="cell",
                             seeds=" ".join(str(x) for x in c["seeds"]), **numbers))
    for d in sorted((d for d in section(results, derive.DIFFERENCES).values()
                     if d["kind"] == "length"), key=lambda d: (d["task"], d["scheme"],
                                                               d["length"])):
        writer.writerow(dict({k: d[k] for k in CSV_FIELDS if k in d}, kind="difference",
                             run=f"{d['a_run']} - {d['b_run']}", status="ok",
                             seeds=" ".join(str(x) for x in d["seeds"])))
    return buf.getvalue()


def summary_lines(results: Results) -> list[str]:
    """What `python -m posjax.evaluation.summary` prints for the algorithmic sections."""
    out = ["", "## algorithmic scores (mean over lengths, then seeds)", "",
           "| run | range | lengths | accuracy | loss | seeds | interval |",
           "|---|---|---|---|---|---|---|"]
    for d in sorted(section(results, derive.SCORES).values(),
                    key=lambda d: (d["task"], d["run"], d["range"])):
        out.append(f"| {d['run']} | {d['range']} | {_span(d['lengths'])} | "
                   f"{_ci(d, 'accuracy')} | {_ci(d, 'loss')} | {_seeds(d)} | "
                   f"{d['accuracy_interval']} |")
    diffs = [d for d in section(results, derive.DIFFERENCES).values() if d["kind"] == "range"]
    avgs = list(section(results, derive.AVERAGES).values())
    if diffs or avgs:
        out += ["", "## algorithmic: randomized minus plain (paired by seed and sequence)", "",
                "| task | scheme | range | accuracy | seeds | interval |",
                "|---|---|---|---|---|---|"]
        for d in sorted(diffs, key=lambda d: (d["task"], d["scheme"], d["range"])):
            out.append(f"| {d['task']} | {d['scheme']} | {d['range']} | "
                       f"{_ci(d, 'accuracy', True)} | {_seeds(d)} | {d['accuracy_interval']} |")
        for d in sorted(avgs, key=lambda d: (d["scheme"], d["range"])):
            out.append(f"| mean of {', '.join(d['tasks'])} | {d['scheme']} | {d['range']} | "
                       f"{_ci(d, 'accuracy', True)} | {_seeds(d)} | "
                       f"{d['accuracy_interval']} |")
    cells = section(results, derive.SEED_CELLS)
    if cells:
        out += ["", f"({len(cells)} per-length cells: results.csv)"]
    return out


def write(out_dir: str, results: dict) -> None:
    report.atomic_write(storage.join(out_dir, "results.md"), to_markdown(results))
    report.atomic_write(storage.join(out_dir, "results.csv"), to_csv(results))
