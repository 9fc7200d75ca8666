"""Outputs of a sweep, all in --out: results.json, results.csv, results.md and PNG plots.

results.json (schema "posjax.extrapolation/2"):
  {"schema", "created", "updated", "versions": {python, jax, flax, numpy, posjax commit},
   "settings": {lengths, methods, alphas, logn, masked_tokens, seed, baseline, ...},
   "runs": {"<workdir>@<step>": {name, workdir, step, scheme, trained_length, causal, config}},
   (workdir: relative to the results folder, so the folder can be moved with its repository)
   "cells": {"<key>": {run, workdir, step, scheme, trained_length, causal, method, label,
                       params, length, seed, status: "ok" | "not_applicable",
                       reason (not_applicable), details (resolved method settings),
                       n_seeds: 1, seeds: [the run's training seed], interval,
                       overall: {count, correct, loss_sum, loss, accuracy[, perplexity],
                                 accuracy_lo, accuracy_hi, loss_lo, loss_hi, rows, clusters,
                                 resampled, interval, n_seeds, seeds},
                       rows: {loss, correct, count, cluster}   (one entry per row)
                       crossing_rows, buckets: [{bucket, start, end, count, correct,
                       loss_sum, loss, accuracy}], wall_s, first_batch_s, rows_per_batch
                       [, recovery: {source, method, step, length}]}},
   "groups", "seed_cells", "reliance", "differences": the runs grouped by training seed and
   the tables' cells, reliance and paired differences over seeds (posjax.evaluation.derive.seeds;
   a run alone is a 1-seed group keyed by its run key)}
Intervals: posjax.evaluation.stats.intervals (each number names its method in `interval`).
Files of schema 1 (no per-row sums) are refused with one line: they
cannot carry intervals. `python -m posjax.evaluation.summary DIR` prints the tables' numbers
from results.json alone.
results.csv: one line per (cell, bucket); bucket 'all' is the overall row (with intervals).
results.md: per run, its position reliance, then accuracy and loss by method x length with
intervals (a method that applies at no length has no row: one line per method names its
not-applicable lengths and reason), the paired difference from the baseline, and the recovery curve when there is one;
image runs (data.corpus='patches') name their lengths as grids (8 x 8) and are described as
images (posjax.evaluation.report.report_words).
Plots: posjax.evaluation.report.plots. Every file is written to a temporary name and renamed. A
sweep writes results.json after every cell (write_cells) and the tables with the figures
(write_tables, posjax.evaluation.report.plots.Redrawer) after a cell when due and at its end.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import subprocess
import time
from typing import Optional

from posjax import schema, storage
from posjax.errors import ConfigError
from posjax.evaluation import derive
from posjax.evaluation.report import report_words as words
from posjax.evaluation.results import results_file
from posjax.evaluation.results.record import Results
from posjax.evaluation.report.recovery_report import recovery_markdown
from posjax.evaluation.results.results_file import (
    SCHEMA, interval_text, method_order,
    relative_workdir, section, seeds_words)


def atomic_write(path: str, text: str) -> None:
    """Whole-file write through posjax.storage (local: temp file + rename)."""
    storage.write_text(path, text)


def versions() -> dict:
    import flax
    import jax
    import numpy

    out = {"python": platform.python_version(), "jax": jax.__version__, "flax": flax.__version__,
           "numpy": numpy.__version__, "backend": jax.default_backend()}
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out["posjax_commit"] = subprocess.run(
            ["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True,
            timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        out["posjax_commit"] = None
    return out


def check_out(out_dir: str) -> Optional[Results]:
    """out_dir's record (None when it has no results.json); ConfigError when it holds one
    this version cannot extend."""
    if not storage.exists(results_file.path_of(out_dir)):
        return None
    try:
        return results_file.load(out_dir)
    except results_file.ResultsFileError as e:
        raise ConfigError("out", out_dir, f"a folder whose results.json this version can "
                          f"extend ({e}): move it away or choose another --out") from None


def load_or_new(out_dir: str, settings: dict) -> Results:
    results = check_out(out_dir)
    storage.makedirs(out_dir)
    if results is not None:
        results["settings"] = settings  # type: ignore[typeddict-item]
        results["versions"] = versions()  # type: ignore[typeddict-item]
        return results
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"schema": SCHEMA, "created": now,  # type: ignore[typeddict-item]
            "versions": versions(), "settings": settings, "runs": {}, "cells": {}}


def run_key(run, out_dir: str) -> str:
    """A run's identity in results.json: its workdir relative to `out_dir`, @ the step."""
    return f"{relative_workdir(run.workdir, out_dir)}@{run.step}"


def run_entry(run, out_dir: str) -> dict:
    return {"name": run.name, "workdir": relative_workdir(run.workdir, out_dir), "step": run.step,
            "scheme": run.scheme,
            "trained_length": run.trained_length,
            "causal": bool(schema.view(run.config).model.causal),
            "config": json.loads(run.config.to_json_best_effort())}


def _cells(results: dict) -> list[dict]:
    return sorted(results["cells"].values(),
                  key=lambda c: (c["run"], c["length"], c["label"]))


CSV_FIELDS = ("run", "scheme", "trained_length", "step", "method", "label", "alpha", "logn",
              "shuffled", "length", "bucket", "start", "end", "status", "n_seeds", "seeds",
              "interval", "count", "rows",
              "crossing_rows", "accuracy", "accuracy_lo", "accuracy_hi", "loss", "loss_lo",
              "loss_hi", "perplexity", "baseline", "diff_accuracy", "diff_accuracy_lo",
              "diff_accuracy_hi", "diff_loss", "diff_loss_lo", "diff_loss_hi", "reason")


def to_csv(results: dict) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    diffs = {d["a"]: d for d in section(results, "differences").values()
             if d["kind"] == "baseline"}
    for key, c in sorted(results["cells"].items(), key=lambda kv: (
            kv[1]["run"], kv[1]["length"], kv[1]["label"])):
        common = {k: c[k] for k in ("run", "scheme", "trained_length", "step", "method",
                                      "label", "length", "status")}
        # a method's parameters are optional, each its own (record.Params): None writes ''
        common["alpha"] = c["params"].get("alpha")
        common["logn"] = bool(c["params"].get("logn"))
        common["shuffled"] = bool(c["params"].get("shuffle_positions"))
        if c["status"] != "ok":
            writer.writerow(dict(common, bucket="all", reason=c["reason"]))
            continue
        o, d = c["overall"], diffs.get(key)  # d: None where the cell has no baseline pair
        writer.writerow(dict(
            common, bucket="all", start=0, end=c["length"], count=o["count"],
            rows=o["rows"], crossing_rows=c["crossing_rows"],
            n_seeds=c["n_seeds"], seeds=" ".join(str(x) for x in c["seeds"]),
            interval=c["interval"],
            perplexity=_fmt(o.get("perplexity")), baseline=d["baseline"] if d else "",
            reason="",
            **{f: _fmt(o[f]) for f in ("accuracy", "accuracy_lo", "accuracy_hi", "loss",
                                       "loss_lo", "loss_hi")},
            **{f"diff_{f}": _fmt(d[f] if d else None) for f in (
                "accuracy", "accuracy_lo", "accuracy_hi", "loss", "loss_lo", "loss_hi")}))
        for b in c["buckets"]:  # per-bucket numbers carry no interval (no per-row split)
            writer.writerow(dict(common, bucket=b["bucket"], start=b["start"], end=b["end"],
                                 count=b["count"], accuracy=_fmt(b["accuracy"]),
                                 loss=_fmt(b["loss"]), perplexity=_fmt(b.get("perplexity")),
                                 reason=""))
    return buf.getvalue()


def _fmt(x, digits: int = 6) -> str:
    return "" if x is None else f"{x:.{digits}g}"


def reliance_line(r: Optional[dict], image: bool = False) -> str:
    if r is None:
        return "position reliance: not measured"
    at = f"{words.length_name(r['length'], True)} (L={r['length']})" if image \
        else f"L={r['length']}"
    return (f"position reliance at {at}: accuracy intact - shuffled positions = "
            f"{interval_text(r, 'accuracy', True)} (intact {r['intact']:.4f}, shuffled "
            f"{r['shuffled']:.4f}; loss difference {interval_text(r, 'loss', True)})")


def _grid(lines, labels, lengths, grid, value, image: bool = False) -> None:
    lines.append("| method | " + " | ".join(words.length_name(n, image) for n in lengths)
                 + " |")
    lines.append("|---|" + "---:|" * len(lengths))
    for label in labels:
        row = []
        for n in lengths:
            c = grid.get((label, n))
            row.append("" if c is None else "n/a" if c["status"] != "ok" else value(c))
        lines.append(f"| {label} | " + " | ".join(row) + " |")


def intervals_words(cells) -> str:
    """The interval methods of a table's cells, for its header."""
    names = sorted({(c["overall"] if "overall" in c else c)[k] for c in cells
                    for k in ("interval", "accuracy_interval", "loss_interval")})
    return "95% intervals: " + ("; ".join(names) if names else "none")


def to_markdown(results: dict) -> str:
    if "seed_cells" not in results:
        derive.derive(results, derive.recorded_baseline(results))
    sc = results["seed_cells"]
    by_group: dict[str, dict] = {}
    for key, c in sc.items():
        by_group.setdefault(c["group"], {})[key] = c
    kinds = {"image" if words.is_image_run(results, info["runs"][0]) else "text"
             for info in section(results, "groups").values()}
    lines = ["# Length extrapolation" + words.mixed_title(results), ""]
    lines += words.intro(results, kinds)
    diffs = [d for d in section(results, "differences").values() if d["kind"] == "baseline"]
    for group, mine in sorted(by_group.items(), key=lambda kv: next(iter(kv[1].values()))["run"]):
        info = results["groups"][group]
        cells = sorted(mine.values(), key=method_order)
        first = cells[0]
        lengths = sorted({c["length"] for c in cells})
        labels = list(dict.fromkeys(c["label"] for c in cells))
        grid = {(c["label"], c["length"]): c for c in cells}
        labels = [lb for lb in labels if any(_ok_seed(c) for c in cells if c["label"] == lb)]
        image = words.is_image_run(results, info["runs"][0])
        na_lines = not_applicable_lines(cells, image)
        n = len(info["seeds"])
        lines += [f"## {first['run']} ({first['scheme']}, trained at "
                  f"{words.trained_at(first['trained_length'], image)}, step {first['step']}, "
                  f"{seeds_words(n, info['seeds'])})", "",
                  reliance_line(section(results, "reliance").get(group), image), ""]
        ok = {c["length"]: c for c in cells if _ok_seed(c)}
        lines.append(words.rows_line(ok, lengths, image))
        lines += ["", intervals_words(c for c in cells if _ok_seed(c)) +
                  (f"; the mean over {n} seeds" if n > 1 else "; 1 seed")]

        def value(c, m, n=n):
            fewer = f" ({seeds_words(c['n_seeds'], c['seeds'])})" if c["n_seeds"] != n else ""
            return interval_text(c["overall"], m) + fewer
        for metric in ("accuracy", "loss"):
            lines += ["", f"{metric} by {'grid' if image else 'length'}:", ""]
            _grid(lines, labels, lengths, grid, lambda c, m=metric: value(c, m), image)
        if na_lines:
            lines += ["", "not applicable (n/a above; a method that applies nowhere has no row):",
                      ""] + na_lines
        mine_diffs = {(d["a_label"], d["length"]): d for d in diffs if d["a"] in mine}
        base = {d["baseline"] for d in mine_diffs.values()}
        if base:
            lines += ["", intervals_words(mine_diffs.values())]
            for metric in ("accuracy", "loss"):
                lines += ["", f"{metric} minus {', '.join(sorted(base))} (paired by seed and "
                          "token):", ""]
                _grid(lines, [lb for lb in labels if any(
                    (lb, n) in mine_diffs for n in lengths)], lengths, grid,
                    lambda c, m=metric: interval_text(mine_diffs.get((c["label"], c["length"]), {}),
                                            m, True), image)
        lines.append("")
    lines += recovery_markdown(results)
    return "\n".join(lines) + "\n"


def not_applicable_lines(cells: list[dict], image: bool = False) -> list[str]:
    """One line per method of one run with not-applicable cells: its lengths (all of them, or
    which) and the first cell's reason, instead of a row of n/a per length."""
    by_label: dict = {}
    for c in cells:
        by_label.setdefault(c["label"], []).append(c)
    out = []
    for label, mine in by_label.items():
        na = sorted((c for c in mine if not _ok_seed(c)), key=lambda c: c["length"])
        if not na:
            continue
        where = ("every length" if len(na) == len(mine) else "L=" + ", ".join(
            words.length_name(c["length"], image) for c in na))
        others = len({c["reason"] for c in na}) - 1
        more = f" (and {others} other reasons: results.json)" if others > 0 else ""
        out.append(f"- {label} ({where}): {na[0]['reason']}{more}")
    return out


def _ok_seed(c: Optional[dict]) -> bool:
    return c is not None and c["status"] == "ok"


DERIVED = ("groups", "seed_cells", "task_seed_cells", "reliance", "differences")


def write_cells(out_dir: str, results: dict) -> None:
    """results.json without its derived sections (write_tables adds them; a reader derives
    them where absent, as the summary does): what a resume needs, cheap enough to write
    after every cell while the tables and figures are redrawn less often."""
    results["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results_file.save(out_dir, {k: v for k, v in results.items()  # type: ignore[misc]
                                if k not in DERIVED})


def write_tables(out_dir: str, results: dict) -> None:
    derive.derive(results, derive.recorded_baseline(results))
    results["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results_file.save(out_dir, results)
    atomic_write(storage.join(out_dir, "results.csv"), to_csv(results))
    atomic_write(storage.join(out_dir, "results.md"), to_markdown(results))
