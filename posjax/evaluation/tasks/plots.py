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


def _length_plot(plt, out_dir: str, task: str, lines: list[dict]) -> str:
    metric = "accuracy" if task == "longdoc" else "exact"
    colours = base._colours(plt, len(lines))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for line, colour in zip(lines, colours):
        base._draw(ax, [c["length"] for c in line["cells"]],
                   [c["overall"] for c in line["cells"]], metric, colour,
                   f"{line['run']} / {line['label']}")
    base._trained(ax, {line["trained"] for line in lines})
    ax.set_xscale("log", base=2)
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("MLM accuracy in one document" if task == "longdoc"
                  else "exact match (whole answer)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    ax.set_title(f"{task}: band = 95% interval", fontsize=9)
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
