"""Task plots (posjax.evaluation.report.figures draws them):

  task_<task>_vs_length.png          one per task: exact match (longdoc: MLM accuracy) against
                                     length, one line per (run, method) with its 95% interval
                                     as a band (small multiples past MAX_PER_AXES lines); the
                                     y axis fits the data and its intervals
  ranking_<task>.png                 one per task with several lines: the same measure at
                                     2x, 8x, 128x the training length, best first
  heatmap_<task>_<run>_<method>.png  one per (run, method) and retrieval task: exact match
                                     over length (x) x depth (y), each square labelled
"""

from __future__ import annotations

import re

import numpy as np
from matplotlib import colormaps

from posjax.evaluation.report.figures import curves, ranking, style
from posjax.evaluation.report.figures.lines import Line, task_lines
from posjax.evaluation.results.results_file import section


# The narrowest y axis of a task plot: an exact-match rate over a few dozen answers moves in
# steps of a few points, and a flat line at 0 should read as 0, not as a magnified wiggle.
FLOOR = 0.1


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")[:80]


def _label(task: str) -> str:
    return "MLM accuracy in one document" if task == "longdoc" else "exact match (whole answer)"


def _metric(task: str) -> str:
    return "accuracy" if task == "longdoc" else "exact"


def write_all(out_dir: str, results: dict) -> list[str]:
    paths = []
    for task in sorted({c["task"] for c in section(results, "tasks").values()}):
        lines = task_lines(results, task)
        if not any(line.cells for line in lines):
            continue
        fig = curves.draw(lines, [(curves.plain(_metric(task)), _label(task))],
                          f"{task}: {_label(task)} against length (band: 95% interval; "
                          "dotted: the training length)", xlabel="evaluation length (tokens)",
                          clip=(-0.02, 1.02), floor=FLOOR)
        paths.append(style.save(fig, out_dir, f"task_{task}_vs_length.png"))
        if len(lines) > 1:
            fig = ranking.draw(lines, _metric(task), f"{task}: {_label(task)}")
            if fig is not None:
                paths.append(style.save(fig, out_dir, f"ranking_{task}.png"))
        if task != "longdoc":
            paths += [_heatmap(out_dir, task, line) for line in lines if line.cells]
    return paths


def _heatmap(out_dir: str, task: str, line: Line) -> str:
    name = f"heatmap_{task}_{_safe(line.run)}_{_safe(line.label)}.png"
    return style.save(_heatmap_figure(task, line), out_dir, name)


def _heatmap_figure(task: str, line: Line):
    """Exact match by length x depth; not-applicable lengths are grey columns that say n/a."""
    lengths = line.lengths()
    depths = sorted({d["depth"] for c in line.cells for d in c["depths"]})
    grid = np.full((len(depths), len(lengths)), np.nan)
    for c in line.cells:
        for d in c["depths"]:
            grid[depths.index(d["depth"]), lengths.index(c["length"])] = d["exact"]
    fig = style.figure(1.6 + 0.9 * len(lengths), 1.4 + 0.5 * len(depths))
    ax = fig.subplots()
    cmap = colormaps["viridis"].with_extremes(bad="0.85")
    im = ax.imshow(grid, vmin=0, vmax=1, cmap=cmap, aspect="auto", origin="upper")
    for i in range(len(depths)):
        for j in range(len(lengths)):
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if grid[i, j] < 0.6 else "black")
            else:
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=7, color="0.2")
    ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], fontsize=7)
    ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths], fontsize=7)
    ax.set_xlabel("length (tokens; trained at %d)" % line.trained, fontsize=8)
    ax.set_ylabel("depth of the key", fontsize=8)
    ax.set_title(f"{task} exact match: {line.name}", fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.05)
    return fig
