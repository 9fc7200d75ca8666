"""Outputs of a sweep, all in --out: results.json, results.csv, results.md and PNG plots.

results.json (schema "posjax.extrapolation/1"):
  {"schema", "created", "updated", "versions": {python, jax, flax, numpy, posjax commit},
   "settings": {lengths, methods, alphas, logn, num_docs, seed, batch_tokens, ...},
   "runs": {"<workdir>@<step>": {name, workdir, step, scheme, trained_length, causal, config}},
   (workdir: relative to the results folder, e.g. "../../workdirs/x", so the folder can be
   moved with its repository or committed; files written before this used absolute paths and
   are rekeyed when loaded)
   "cells": {"<key>": {run, workdir, step, scheme, trained_length, causal, method, label,
                       params, length, num_docs, seed, status: "ok" | "not_applicable",
                       reason (not_applicable), details (resolved method settings),
                       overall: {count, correct, loss_sum, loss, accuracy[, perplexity]},
                       buckets: [{bucket, start, end, count, correct, loss_sum, loss,
                                  accuracy[, perplexity]}], wall_s, first_batch_s,
                       rows_per_batch}}}
results.csv: one line per (cell, bucket); bucket 'all' is the overall row; not_applicable
cells have one line with the reason and empty numbers.
results.md: per run, MLM accuracy and loss (causal: perplexity and accuracy) by method x length, then the
per-bucket accuracy at the longest length.
Plots: accuracy_vs_length.png, accuracy_by_position.png (buckets at the longest length), and
comparison.png (all runs on one axes) when there are several runs.
Every file is written to a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import subprocess
import time

SCHEMA = "posjax.extrapolation/1"
RESULTS = "results.json"


def atomic_write(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


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


def load_or_new(out_dir: str, settings: dict) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, RESULTS)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            results = json.load(f)
        if results.get("schema") == SCHEMA:
            relative_keys(results, out_dir)
            results["settings"] = settings
            results["versions"] = versions()
            return results
    return {"schema": SCHEMA, "created": now, "versions": versions(), "settings": settings,
            "runs": {}, "cells": {}}


def relative_workdir(workdir: str, out_dir: str) -> str:
    """`workdir` as a path relative to the results folder (absolute paths tie a results file
    to one machine; relative ones survive moving or cloning the tree that holds both). Paths
    with no relative form (another Windows drive) stay absolute."""
    if not os.path.isabs(workdir):
        return workdir
    try:
        return os.path.relpath(workdir, os.path.abspath(out_dir))
    except ValueError:
        return workdir


def run_key(run, out_dir: str) -> str:
    """A run's identity in results.json: its workdir relative to `out_dir`, @ the step."""
    return f"{relative_workdir(run.workdir, out_dir)}@{run.step}"


def _rekey(key: str, out_dir: str) -> str:
    """A run key ('<workdir>@<step>') or cell key ('<run key>|...') with an absolute workdir
    made relative; relative keys come back unchanged."""
    head, bar, tail = key.partition("|")
    workdir, at, step = head.rpartition("@")
    if not at or not os.path.isabs(workdir):
        return key
    return f"{relative_workdir(workdir, out_dir)}@{step}{bar}{tail}"


def relative_keys(results: dict, out_dir: str) -> dict:
    """Rekey (in place) a results dict written with absolute workdir paths, so an older
    results.json resumes under today's keys (its finished cells are found, not redone) and
    its records name workdirs the same way as new ones. Returns `results`."""
    for section in ("runs", "cells"):
        entries = results.get(section, {})
        rekeyed = {}
        for key, entry in entries.items():
            if isinstance(entry, dict) and isinstance(entry.get("workdir"), str):
                entry["workdir"] = relative_workdir(entry["workdir"], out_dir)
            rekeyed[_rekey(key, out_dir)] = entry
        results[section] = rekeyed
    return results


def run_entry(run, out_dir: str) -> dict:
    return {"name": run.name, "workdir": relative_workdir(run.workdir, out_dir), "step": run.step,
            "scheme": run.scheme,
            "trained_length": run.trained_length,
            "causal": bool(run.config.model.get("causal", False)),
            "config": json.loads(run.config.to_json_best_effort())}


def _cells(results: dict) -> list[dict]:
    return sorted(results["cells"].values(),
                  key=lambda c: (c["run"], c["length"], c["label"]))


CSV_FIELDS = ("run", "scheme", "trained_length", "step", "method", "label", "alpha", "logn",
              "length", "bucket", "start", "end", "status", "count", "accuracy", "loss",
              "perplexity", "reason")


def to_csv(results: dict) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for c in _cells(results):
        common = {k: c.get(k) for k in ("run", "scheme", "trained_length", "step", "method",
                                          "label", "length", "status")}
        common["alpha"] = c["params"].get("alpha", "")
        common["logn"] = bool(c["params"].get("logn", False))
        if c["status"] != "ok":
            writer.writerow(dict(common, bucket="all", reason=c.get("reason", "")))
            continue
        for b in [dict(c["overall"], bucket="all", start=0, end=c["length"]), *c["buckets"]]:
            writer.writerow(dict(common, bucket=b["bucket"], start=b["start"], end=b["end"],
                                 count=b["count"], accuracy=_fmt(b["accuracy"]),
                                 loss=_fmt(b["loss"]), perplexity=_fmt(b.get("perplexity")),
                                 reason=""))
    return buf.getvalue()


def _fmt(x, digits: int = 6) -> str:
    return "" if x is None else f"{x:.{digits}g}"


def to_markdown(results: dict) -> str:
    lines = ["# Length extrapolation", ""]
    s = results.get("settings", {})
    lines.append(f"max({s.get('num_docs')}, {s.get('min_tokens') or 0} // length) held-out rows per "
                 f"length (seed {s.get('seed')}), the same "
                 "rows and masks for every method of a run. `n/a` = not applicable (see "
                 "results.json for the reason). Buckets: positions [0, T), [T, 2T), [2T, 4T), ...")
    lines.append("")
    by_run: dict[str, list[dict]] = {}
    for c in _cells(results):
        by_run.setdefault(c["run"], []).append(c)
    for run, cells in by_run.items():
        causal = cells[0]["causal"]
        lengths = sorted({c["length"] for c in cells})
        labels = list(dict.fromkeys(c["label"] for c in sorted(cells, key=_method_order)))
        grid = {(c["label"], c["length"]): c for c in cells}
        lines.append(f"## {run} ({cells[0]['scheme']}, trained at {cells[0]['trained_length']}, "
                     f"step {cells[0]['step']})")
        for metric in (("perplexity", "accuracy") if causal else ("accuracy", "loss")):
            title = {"accuracy": "MLM accuracy" if not causal else "next-token accuracy",
                     "loss": "MLM loss", "perplexity": "perplexity"}[metric]
            lines += ["", f"{title} by length:", ""]
            lines.append("| method | " + " | ".join(str(n) for n in lengths) + " |")
            lines.append("|---|" + "---:|" * len(lengths))
            for label in labels:
                row = []
                for n in lengths:
                    c = grid.get((label, n))
                    if c is None:
                        row.append("")
                    elif c["status"] != "ok":
                        row.append("n/a")
                    else:
                        row.append(f"{c['overall'][metric]:.4f}")
                lines.append(f"| {label} | " + " | ".join(row) + " |")
        longest = max(lengths)
        ok = [grid[(lb, longest)] for lb in labels
              if (lb, longest) in grid and grid[(lb, longest)]["status"] == "ok"]
        if ok:
            buckets = [b["bucket"] for b in ok[0]["buckets"]]
            lines += ["", f"Accuracy by position at length {longest}:", "",
                      "| method | " + " | ".join(buckets) + " |", "|---|" + "---:|" * len(buckets)]
            for c in ok:
                vals = [_fmt(b["accuracy"], 4) if b["accuracy"] is not None else ""
                        for b in c["buckets"]]
                lines.append(f"| {c['label']} | " + " | ".join(vals) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _method_order(c: dict) -> tuple:
    from posjax.evaluation.methods import METHODS

    m = c["method"]
    return (METHODS.index(m) if m in METHODS else 99, c["params"].get("alpha") or 0,
            bool(c["params"].get("logn")))


def write_tables(out_dir: str, results: dict) -> None:
    results["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    atomic_write(os.path.join(out_dir, RESULTS), json.dumps(results, indent=1, sort_keys=True))
    atomic_write(os.path.join(out_dir, "results.csv"), to_csv(results))
    atomic_write(os.path.join(out_dir, "results.md"), to_markdown(results))


def write_plots(out_dir: str, results: dict) -> list[str]:
    """PNGs (matplotlib, Agg): accuracy_vs_length.png and accuracy_by_position.png with one
    panel per run (a grid of up to 4 columns, one y-scale for all panels so runs compare by
    eye), and with several runs comparison.png: every run and method on one axes. Returns the
    paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_run: dict[str, list[dict]] = {}
    for c in _cells(results):
        if c["status"] == "ok":
            by_run.setdefault(c["run"], []).append(c)
    if not by_run:
        return []
    paths = []
    n = len(by_run)
    cols = min(n, 4)
    rows = -(-n // cols)
    for kind in ("length", "position"):
        fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4.0 * rows), squeeze=False,
                                 sharey=True)
        flat = list(axes.flat)
        for ax, (run, cells) in zip(flat, by_run.items()):
            longest = max(c["length"] for c in cells)
            for label, xs, ys in _series(cells, kind, longest):
                ax.plot(xs, ys, marker="o", label=label)
            _decorate(ax, cells[0]["trained_length"], kind,
                      f"{run}: accuracy vs length" if kind == "length"
                      else f"{run}: accuracy by position at L={longest}")
        for ax in flat[n:]:
            ax.set_visible(False)
        paths.append(_save(fig, plt, out_dir,
                           f"accuracy_{'vs_length' if kind == 'length' else 'by_position'}.png"))
    if n > 1:
        fig, ax = plt.subplots(figsize=(9, 6))
        styles = ["-", "--", "-.", ":"]
        for color, (run, cells) in zip(_colors(plt, n), by_run.items()):
            for i, (label, xs, ys) in enumerate(_series(cells, "length", 0)):
                ax.plot(xs, ys, marker="o", markersize=3, color=color,
                        linestyle=styles[i % len(styles)], label=f"{run} / {label}")
        trained = sorted({cells[0]["trained_length"] for cells in by_run.values()})
        _decorate(ax, trained[0] if len(trained) == 1 else None, "length",
                  "accuracy vs length, all runs")
        ax.legend(fontsize=6, ncol=2)
        paths.append(_save(fig, plt, out_dir, "comparison.png"))
    return paths


def _series(cells: list[dict], kind: str, longest: int):
    """(label, xs, ys) per method of one run: accuracy by length, or by position bucket at
    the length `longest`."""
    labels = list(dict.fromkeys(c["label"] for c in sorted(cells, key=_method_order)))
    for label in labels:
        mine = sorted((c for c in cells if c["label"] == label), key=lambda c: c["length"])
        if kind == "length":
            yield label, [c["length"] for c in mine], [c["overall"]["accuracy"] for c in mine]
            continue
        at = [c for c in mine if c["length"] == longest]
        if at:
            bs = [b for b in at[0]["buckets"] if b["accuracy"] is not None]
            yield label, [max(b["start"], 1) for b in bs], [b["accuracy"] for b in bs]


def _decorate(ax, trained, kind: str, title: str) -> None:
    if trained is not None:
        ax.axvline(trained, color="grey", linestyle=":", label=f"trained ({trained})")
    ax.set_xscale("log", base=2)
    ax.set_ylabel("accuracy")
    ax.set_xlabel("evaluation length (tokens)" if kind == "length"
                  else "position bucket start (tokens)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _colors(plt, n: int) -> list:
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def _save(fig, plt, out_dir: str, name: str) -> str:
    """Write atomically (temp file + rename): a killed run never leaves half a PNG."""
    fig.tight_layout()
    path = os.path.join(out_dir, name)
    tmp = f"{path}.tmp{os.getpid()}.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return path
