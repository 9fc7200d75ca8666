"""PNG plots of a sweep (matplotlib, Agg), drawn so a reader can decode them at a glance.

  accuracy_vs_length.png  accuracy (left) and MLM loss (right) against evaluation length
  recovery.png            accuracy (left) and loss (right) against continued-training steps,
                          one line per method (only when results hold a recovery curve)

Every line is one (run, method) with its OWN colour (tab10, or tab20 past 10 lines), its 95%
bootstrap interval drawn as a band of the same colour, the training length marked by a grey
dotted line, the legend outside the axes. With more than MAX_LINES lines the length plot
becomes a grid of small multiples: one panel per (run, method), its line in colour over the
other lines in light grey, every panel on the same axes limits.
"""

from __future__ import annotations

import io

from posjax import storage
from posjax.evaluation import report_words as words

MAX_LINES = 8


def _series(results: dict, skip_runs: set) -> list[dict]:
    """One entry per (run, method label): xs (lengths) and the overall numbers of its cells."""
    lines: dict = {}
    for key, c in results["cells"].items():
        if c.get("status") != "ok" or key.partition("|")[0] in skip_runs or "rows" not in c:
            continue
        if c["params"].get("shuffle_positions"):
            continue  # the reliance check, reported as one number, not a curve
        name = (c["run"], c["label"])
        lines.setdefault(name, {"run": c["run"], "label": c["label"],
                                "trained": c["trained_length"], "cells": [],
                                "image": words.is_image_run(results, key.partition("|")[0])})
        lines[name]["cells"].append(c)
    out = []
    for line in sorted(lines.values(), key=lambda d: (d["run"], _order(d["cells"][0]))):
        line["cells"].sort(key=lambda c: c["length"])
        out.append(line)
    return out


def _order(c: dict) -> tuple:
    from posjax.evaluation.report import _method_order

    return _method_order(c)


def _colours(plt, n: int) -> list:
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def _draw(ax, xs, overall: list[dict], metric: str, colour, label: str | None, **kw) -> None:
    ys = [o[metric] for o in overall]
    ax.plot(xs, ys, marker="o", markersize=3, color=colour, label=label, **kw)
    lo = [o.get(f"{metric}_lo") for o in overall]
    hi = [o.get(f"{metric}_hi") for o in overall]
    if all(v is not None for v in lo + hi):
        ax.fill_between(xs, lo, hi, color=colour, alpha=0.2, linewidth=0)


def _trained(ax, trained: set) -> None:
    for t in sorted(trained):
        ax.axvline(t, color="grey", linestyle=":", linewidth=1)
    if trained:
        ax.text(min(trained), 1.0, " trained", transform=ax.get_xaxis_transform(),
                color="grey", fontsize=7, va="top")


def write_all(out_dir: str, results: dict, skip_runs: set = frozenset()) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    lines = _series(results, set(skip_runs))
    if lines:
        paths.append(_length_plot(plt, out_dir, lines))
    if results.get("recovery"):
        paths.append(_recovery_plot(plt, out_dir, results))
    return paths


def _xlabel(lines: list[dict]) -> str:
    """Image runs' lengths are grids of patches (posjax.evaluation.report_words)."""
    image = {line["image"] for line in lines}
    if image == {True}:
        return "evaluation length (patches of a g x g grid: 64 = 8 x 8)"
    return "evaluation length (tokens; patches for image runs)" if True in image \
        else "evaluation length (tokens)"


def _length_plot(plt, out_dir: str, lines: list[dict]) -> str:
    colours = _colours(plt, len(lines))
    trained = {line["trained"] for line in lines}
    def name(line):
        return f"{line['run']} / {line['label']}"
    if len(lines) <= MAX_LINES:
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
        for metric, ax in zip(("accuracy", "loss"), axes):
            for line, colour in zip(lines, colours):
                _draw(ax, [c["length"] for c in line["cells"]],
                      [c["overall"] for c in line["cells"]], metric, colour, name(line))
            _axes(ax, metric, trained, _xlabel(lines))
        axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        return _save(fig, plt, out_dir, "accuracy_vs_length.png")
    cols = min(4, len(lines))
    rows = -(-len(lines) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False,
                             sharex=True, sharey=True)
    for ax, line, colour in zip(axes.flat, lines, colours):
        for other in lines:  # context: every other line in light grey
            if other is not line:
                ax.plot([c["length"] for c in other["cells"]],
                        [c["overall"]["accuracy"] for c in other["cells"]], color="0.85",
                        linewidth=0.8)
        _draw(ax, [c["length"] for c in line["cells"]], [c["overall"] for c in line["cells"]],
              "accuracy", colour, name(line))
        _axes(ax, "accuracy", trained, "length")
        ax.set_title(name(line), fontsize=8)
    for ax in list(axes.flat)[len(lines):]:
        ax.set_visible(False)
    fig.suptitle("accuracy vs length (band: 95% interval; grey: the other lines; loss in "
                 "results.md)", fontsize=9)
    return _save(fig, plt, out_dir, "accuracy_vs_length.png")


def _axes(ax, metric: str, trained: set, xlabel: str, log: bool = True) -> None:
    _trained(ax, trained)
    if log:
        ax.set_xscale("log", base=2)
    ax.set_ylabel(metric if metric == "accuracy" else "MLM loss")
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)


def _recovery_plot(plt, out_dir: str, results: dict) -> str:
    curves = sorted(results["recovery"].values(), key=lambda c: (c["source"], c["length"],
                                                                  c["label"]))
    colours = _colours(plt, len(curves))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for metric, ax in zip(("accuracy", "loss"), axes):
        for curve, colour in zip(curves, colours):
            pts = []
            for step, key in curve["cells"].items():
                c = results["cells"].get(key)
                if c is not None and c.get("status") == "ok":
                    pts.append((int(step), c["overall"]))
            pts.sort(key=lambda p: p[0])
            if pts:
                _draw(ax, [p[0] for p in pts], [p[1] for p in pts], metric, colour,
                      f"{curve['source']} / {curve['label']} @ L={curve['length']}")
        steps = sorted({int(s) for curve in curves for s in curve["cells"]})
        ax.set_xticks(steps)  # linear steps, ticked where the curve was measured
        ax.set_xlabel("continued-training steps at the new length")
        ax.set_ylabel(metric if metric == "accuracy" else "MLM loss")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle("recovery (band: 95% interval over documents)", fontsize=9)
    return _save(fig, plt, out_dir, "recovery.png")


def _save(fig, plt, out_dir: str, name: str) -> str:
    """Write whole through posjax.storage: a killed run never leaves half a PNG."""
    fig.tight_layout()
    path = storage.join(out_dir, name)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    storage.write_bytes(path, buf.getvalue())
    return path
