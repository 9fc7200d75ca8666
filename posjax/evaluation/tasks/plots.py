"""Task plots (matplotlib, Agg):

  task_<task>_vs_length.png        one per task: exact match (longdoc: MLM accuracy) against
                                   length, one colour per (run, method), its 95% interval as
                                   a band, the training length dotted, the legend outside
  heatmap_<task>_<run>_<method>.png  one per (run, method) and retrieval task: exact match
                                   over length (x) x depth (y), each square labelled
"""

from __future__ import annotations

import re

from posjax.evaluation import plots as base


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")[:80]


def _lines(results: dict, task: str) -> list[dict]:
    lines: dict = {}
    for c in results.get("tasks", {}).values():
        if c["task"] != task or c.get("status") != "ok":
            continue
        name = (c["run"], c["label"])
        lines.setdefault(name, {"run": c["run"], "label": c["label"], "first": c,
                                "trained": c["trained_length"], "cells": []})["cells"].append(c)
    out = sorted(lines.values(), key=lambda d: (d["run"], base._order(d["first"])))
    for line in out:
        line["cells"].sort(key=lambda c: c["length"])
    return out


def write_all(out_dir: str, results: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for task in sorted({c["task"] for c in results.get("tasks", {}).values()}):
        lines = _lines(results, task)
        if not lines:
            continue
        paths.append(_length_plot(plt, out_dir, task, lines))
        if task != "longdoc":
            paths += [_heatmap(plt, out_dir, task, line) for line in lines]
    return paths


def _label(task: str) -> str:
    return "MLM accuracy in one document" if task == "longdoc" else "exact match (whole answer)"


def _length_plot(plt, out_dir: str, task: str, lines: list[dict]) -> str:
    """One axes with a legend outside; past base.MAX_LINES lines, small multiples (one panel
    per (run, method), the other lines in light grey, all panels on the same axes)."""
    metric = "accuracy" if task == "longdoc" else "exact"
    colours = base._colours(plt, len(lines))
    trained = {line["trained"] for line in lines}
    xs = lambda line: [c["length"] for c in line["cells"]]  # noqa: E731
    name = lambda line: f"{line['run']} / {line['label']}"  # noqa: E731
    if len(lines) <= base.MAX_LINES:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for line, colour in zip(lines, colours):
            base._draw(ax, xs(line), [c["overall"] for c in line["cells"]], metric, colour,
                       name(line))
        panels, cols = [ax], 1
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        ax.set_title(f"{task}: band = 95% interval", fontsize=9)
    else:
        cols = min(4, len(lines))
        rows = -(-len(lines) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False,
                                 sharex=True, sharey=True)
        panels = list(axes.flat)[:len(lines)]
        for ax, line, colour in zip(panels, lines, colours):
            for other in lines:
                if other is not line:
                    ax.plot(xs(other), [c["overall"][metric] for c in other["cells"]],
                            color="0.85", linewidth=0.8)
            base._draw(ax, xs(line), [c["overall"] for c in line["cells"]], metric, colour,
                       name(line))
            ax.set_title(name(line), fontsize=8)
        for ax in list(axes.flat)[len(lines):]:
            ax.set_visible(False)
        fig.suptitle(f"{task}: {_label(task)} vs length (band: 95% interval; grey: the other "
                     "lines)", fontsize=9)
    for i, ax in enumerate(panels):
        base._trained(ax, trained)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("evaluation length (tokens)", fontsize=8)
        if i % cols == 0:
            ax.set_ylabel(_label(task), fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    return base._save(fig, plt, out_dir, f"task_{task}_vs_length.png")


def _heatmap(plt, out_dir: str, task: str, line: dict) -> str:
    import numpy as np

    lengths = [c["length"] for c in line["cells"]]
    depths = sorted({d["depth"] for c in line["cells"] for d in c["depths"]})
    grid = np.full((len(depths), len(lengths)), np.nan)
    for j, c in enumerate(line["cells"]):
        for d in c["depths"]:
            grid[depths.index(d["depth"]), j] = d["exact"]
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * len(lengths), 1.2 + 0.5 * len(depths)))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="upper")
    for i in range(len(depths)):
        for j in range(len(lengths)):
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if grid[i, j] < 0.6 else "black")
    ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], fontsize=7)
    ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths], fontsize=7)
    ax.set_xlabel("length (tokens; trained at %d)" % line["trained"], fontsize=8)
    ax.set_ylabel("depth of the key", fontsize=8)
    ax.set_title(f"{task} exact match: {line['run']} / {line['label']}", fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.05)
    name = f"heatmap_{task}_{_safe(line['run'])}_{_safe(line['label'])}.png"
    return base._save(fig, plt, out_dir, name)
