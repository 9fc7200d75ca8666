"""The PNGs of a sweep (posjax.evaluation.report.figures draws them):

  accuracy_vs_length.png  accuracy (and MLM loss) against evaluation length; small multiples
                          of the accuracy past figures.curves.MAX_PER_AXES lines
  ranking.png             accuracy at up to three evaluated multiples of the training length,
                          best first (several lines and some length beyond the training
                          length)
A (run, method) with no evaluated cell is not drawn; each figure names those in its title.
  differences.png         accuracy minus the --baseline method, paired (with a baseline)
  recovery.png            accuracy and loss against continued-training steps (with a
                          recovery curve)

A sweep redraws them, with its tables, while it runs (Redrawer): after its first cell, then after a cell only
when the time since the last redraw is at least REDRAW_EVERY times what that redraw took (so
figures take at most about a tenth of the run), and always at its end, a stopped run too.

Regenerate every figure of a results folder from its results.json alone (task figures too):
  python -m posjax.evaluation.report.plots RESULTS_DIR [--out OTHER_DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable

from posjax import storage
from posjax.errors import ConfigError
from posjax.evaluation import derive
from posjax.evaluation.results import results_file
from posjax.evaluation.report.figures import curves, differences, ranking, style
from posjax.evaluation.report.figures.lines import (Line, baseline_differences, mlm_lines,
                                             not_applicable_note, point, seed_text)
from posjax.evaluation.report.tasks import plots as task_plots

MAX_LINES = curves.MAX_PER_AXES
REDRAW_EVERY = 10


class Redrawer:
    """Calls draw() after a cell when due (see the module doc) and at the end; `spent` is the
    seconds every redraw took, `count` how many there were."""

    def __init__(self, draw: Callable[[], object], every: float = REDRAW_EVERY,
                 clock: Callable[[], float] = time.perf_counter):
        self.draw, self.every, self.clock = draw, every, clock
        self.last_end = None
        self.last_cost = 0.0
        self.spent = 0.0
        self.count = 0

    def now(self) -> None:
        t0 = self.clock()
        self.draw()
        self.last_end = self.clock()
        self.last_cost = self.last_end - t0
        self.spent += self.last_cost
        self.count += 1

    def after_cell(self) -> None:
        if self.last_end is None or self.clock() - self.last_end >= self.every * self.last_cost:
            self.now()


def _series(results: dict, skip_runs: set) -> list[Line]:
    return mlm_lines(results, skip_runs)


def _xlabel(lines: list[Line]) -> str:
    """Image runs' lengths are grids of patches (posjax.evaluation.report.report_words)."""
    image = {line.image for line in lines}
    if image == {True}:
        return "evaluation length (patches of a g x g grid: 64 = 8 x 8)"
    return "evaluation length (tokens; patches for image runs)" if True in image \
        else "evaluation length (tokens)"


def write_plots(out_dir: str, results: dict) -> list[str]:
    """The PNGs of an evaluation's results (the recovery runs' curves are the recovery
    report's); returns the paths written."""
    return write_all(out_dir, results, skip_runs=results_file.recovery_runs(results))


def write_all(out_dir: str, results: dict, skip_runs: set = frozenset()) -> list[str]:
    every = _series(results, set(skip_runs))
    note = not_applicable_note(every)  # lines without any evaluated cell: named, not drawn
    lines = [line for line in every if line.cells]
    paths = []
    if lines:
        fig = curves.draw(lines, [(curves.plain("accuracy"), "accuracy"),
                                  (curves.plain("loss"), "MLM loss")],
                          "accuracy and MLM loss against length (band: 95% interval; "
                          "dotted: the training length)", xlabel=_xlabel(lines),
                          panels_title="accuracy against length (band: 95% interval; dotted: "
                          "the training length; loss: results.md)", note=note)
        paths.append(style.save(fig, out_dir, "accuracy_vs_length.png"))
    if len(lines) > 1:
        fig = ranking.draw(lines, "accuracy", "MLM accuracy", note=note)
        if fig is not None:
            paths.append(style.save(fig, out_dir, "ranking.png"))
    fig = differences.draw(lines, baseline_differences(results))
    if fig is not None:
        paths.append(style.save(fig, out_dir, "differences.png"))
    if results_file.section(results, "recovery"):
        paths.append(style.save(_recovery(results), out_dir, "recovery.png"))
    return paths


def _recovery(results: dict):
    """Accuracy and loss against continued-training steps, one line per (source, method,
    length), ticked at the measured steps on a linear axis."""
    found = sorted(results["recovery"].values(),
                   key=lambda c: (c["source"], c["length"], c["label"]))
    fig = style.figure(12.0, 4.2)
    axes = fig.subplots(1, 2)
    for metric, ax in zip(("accuracy", "loss"), axes):
        values = []
        for i, curve in enumerate(found):
            points = []
            for step, key in curve["cells"].items():
                c = results["cells"].get(key)  # a curve's cell not evaluated (yet)
                if c is not None and c["status"] == "ok":
                    points.append(point(int(step), c["overall"], metric))
            points.sort()
            values += [v for p in points for v in p[1:]]
            curves.draw_line(ax, points, style.PALETTE[i % len(style.PALETTE)],
                             style.MARKERS[i % len(style.MARKERS)],
                             f"{curve['source']} / {curve['label']} @ L={curve['length']}")
        ax.set_xticks(sorted({int(s) for curve in found for s in curve["cells"]}))
        ax.set_xlabel("continued-training steps at the new length", fontsize=8)
        ax.set_ylabel("accuracy" if metric == "accuracy" else "MLM loss", fontsize=8)
        ax.set_ylim(*style.limits(values))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", fontsize=7,
               ncols=min(3, len(found)))
    cells = [results["cells"][key] for curve in found for key in curve["cells"].values()
             if key in results["cells"]]
    fig.suptitle(f"recovery (band: 95% interval over documents), {seed_text(cells)} per point",
                 fontsize=9)
    return fig


def write_folder(results_dir: str, out_dir: str) -> list[str]:
    """Every figure of `results_dir`/results.json, written to `out_dir`."""
    try:
        results = results_file.load(results_dir)
    except results_file.ResultsFileError as e:
        raise ConfigError("results_dir", results_dir, f"a folder holding a results.json "
                          f"this version reads ({e})") from None
    if "seed_cells" not in results:  # written mid-sweep (report.write_cells): derive them
        derive.derive(results, derive.recorded_baseline(results))
    storage.makedirs(out_dir)
    paths = write_all(out_dir, results, skip_runs=results_file.recovery_runs(results))
    return paths + task_plots.write_all(out_dir, results)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m posjax.evaluation.report.plots",
        description="Redraw every figure of a results folder from its results.json alone.")
    parser.add_argument("results_dir", help="a folder written by eval.py (holds results.json)")
    parser.add_argument("--out", default=None,
                        help="where the PNGs go (default: the results folder itself)")
    args = parser.parse_args(argv)
    try:
        paths = write_folder(args.results_dir, args.out or args.results_dir)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
