"""The ranking chart: which (run, method) does best at the multiples of the training length
that were evaluated.

One panel per evaluated multiple (at most MAX_PANELS: the shortest, the longest and the one
nearest their middle); a line that lacks that exact multiple (another training length)
takes its nearest evaluated length beyond the training length on a log scale, ties to the
longer, named as such; a length already shown for a smaller multiple is not shown twice.
Each row is one (run, method): a dot at the estimate with its 95% interval as a bar, a hollow
grey circle at its own level at the training length, its seeds in the label ("1 seed"); rows
sorted best first; a (run, method) not applicable at the panel's length is no row (a line
that applies nowhere is named in the title, by the caller). Where a run without positions
(position.name 'none') is present, its level is a grey reference band in every panel.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

from matplotlib.patches import Patch

from posjax.evaluation.report import report_words as words
from posjax.evaluation.report.figures import style
from posjax.evaluation.report.figures.lines import NOPE, Line, point, seeds

MAX_PANELS = 3
DOT = "#1f4e9c"


class Row(NamedTuple):
    line: Line
    cell: dict
    length: int

    @property
    def ok(self) -> bool:
        return self.cell["status"] == "ok"


def nearest(line: Line, multiple: float) -> Optional[int]:
    """The evaluated length of `line` beyond its training length nearest (log scale) to
    multiple x its training length; ties go to the longer length."""
    target = multiple * line.trained
    beyond = [c["length"] for c in line.cells if c["length"] > line.trained]
    if not beyond:
        return None
    return min(beyond, key=lambda n: (abs(math.log2(n / target)), -n))


def multiples(lines: list[Line]) -> list[float]:
    """The multiples of the training length that were evaluated beyond it (length / trained
    of every line's evaluated lengths), at most MAX_PANELS of them: the shortest, the
    longest and the one nearest their middle on a log scale."""
    found = sorted({c["length"] / line.trained for line in lines for c in line.cells
                    if c["length"] > line.trained})
    if len(found) <= MAX_PANELS:
        return found
    middle = math.sqrt(found[0] * found[-1])
    inner = min(found[1:-1], key=lambda m: (abs(math.log2(m / middle)), -m))
    return [found[0], inner, found[-1]]


def panels(lines: list[Line]) -> list[tuple[float, list[Row]]]:
    """(multiple, rows) for each evaluated multiple with at least one row; lines with no
    evaluated cell are not rows (the figure names them)."""
    lines = [line for line in lines if line.cells]
    shown: dict = {line.name: set() for line in lines}
    out = []
    for multiple in multiples(lines):
        rows = []
        for line in lines:
            length = nearest(line, multiple)
            if length is None or length in shown[line.name]:
                continue
            shown[line.name].add(length)
            rows.append(Row(line, line.cell_at(length), length))
        if rows:
            out.append((multiple, rows))
    return out


def ranked(rows: list[Row], metric: str) -> list[Row]:
    """Best first (the higher estimate), not-applicable rows last."""
    return (sorted([r for r in rows if r.ok], key=lambda r: -r.cell["overall"][metric])
            + sorted([r for r in rows if not r.ok], key=lambda r: r.line.name))


def title(multiple: float, rows: list[Row]) -> str:
    places = {(r.length, r.line.trained) for r in rows}
    if len(places) > 1:
        return f"about {multiple:g}x the training length (length per row)"
    ((length, trained),) = places
    grid = words.length_name(length, rows[0].line.image)
    name = f"L={length}" + (f", {grid}" if grid != str(length) else "")
    if length == multiple * trained:
        return f"{multiple:g}x the training length ({name})"
    return (f"{multiple:g}x the training length: not evaluated for this run; nearest {name} "
            f"({length / trained:g}x)")


def row_label(row: Row, mixed: bool) -> str:
    where = f", L={row.length}" if mixed else ""
    return f"{row.line.name} ({seeds(row.cell).text()}{where})"


def _reference(rows: list[Row], metric: str):
    """The no-positions run's point in this panel (its first method in method order)."""
    for r in rows:
        if r.line.position == NOPE and r.ok:
            return r, point(r.length, r.cell["overall"], metric)
    return None


def _at_trained(row: Row, metric: str):
    c = row.line.cell_at(row.line.trained)
    return c["overall"][metric] if c is not None and c["status"] == "ok" else None


def draw(lines: list[Line], metric: str, metric_label: str, note: str = ""):
    """The ranking Figure of `lines` on `metric`, or None when no length beyond the training
    length was evaluated; `note` is a second title line."""
    parts = [(m, ranked(rows, metric)) for m, rows in panels(lines)]
    if not parts:
        return None
    most = max(len(rows) for _, rows in parts)
    fig = style.figure(6.4 * len(parts), 1.8 + 0.25 * most)
    axes = fig.subplots(1, len(parts), squeeze=False, sharex=True)[0]
    xs = [v for _, rows in parts for r in rows if r.ok
          for v in (point(r.length, r.cell["overall"], metric)[1:])]
    xs += [_at_trained(r, metric) for _, rows in parts for r in rows]
    xlim = style.limits(xs, pad=0.05, clip=(-0.01, 1.01))
    handles = {}
    for ax, (multiple, rows) in zip(axes, parts):
        mixed = len({r.length for r in rows}) > 1
        ys = list(range(len(rows)))[::-1]  # best at the top
        reference = _reference(rows, metric)
        if reference is not None:
            r, p = reference
            if p.lo is not None:
                handles["band"] = ax.axvspan(p.lo, p.hi, color="0.55", alpha=0.25, linewidth=0,
                                             label=f"no positions ({r.line.name}): 95% "
                                                   "interval", zorder=0)
            ax.axvline(p.y, color="0.4", linestyle="--", linewidth=1, zorder=1)
        for y, r in zip(ys, rows):
            trained_level = _at_trained(r, metric)
            if trained_level is not None:
                handles["trained"], = ax.plot(
                    [trained_level], [y], linestyle="none", marker="o", markersize=6,
                    markerfacecolor="none", markeredgecolor="0.5", zorder=2,
                    label="the same line at the training length")
            if r.ok:
                p = point(r.length, r.cell["overall"], metric)
                err = None if p.lo is None else [[p.y - p.lo], [p.hi - p.y]]
                handles["dot"] = ax.errorbar([p.y], [y], xerr=err, fmt="o", color=DOT,
                                             markersize=5, capsize=2.5, elinewidth=1.6,
                                             zorder=3, label="estimate, 95% interval")
            else:
                ax.plot([0.02], [y], linestyle="none", marker="x", markersize=7,
                        markeredgewidth=1.8, color="0.2", zorder=3,
                        transform=ax.get_yaxis_transform())
                ax.text(0.05, y, "not applicable", transform=ax.get_yaxis_transform(),
                        va="center", fontsize=7, color="0.2")
                handles["na"] = style.missing_handle()
        ax.set_yticks(ys, [row_label(r, mixed) for r in rows], fontsize=7)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_xlim(*xlim)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xlabel(metric_label, fontsize=8)
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(title(multiple, rows), fontsize=8)
    order = [k for k in ("dot", "trained", "band", "na") if k in handles]
    fig.legend([handles[k] if k != "band" else Patch(color="0.55", alpha=0.25)
                for k in order], [handles[k].get_label() for k in order],
               loc="outside lower center", ncols=len(order), fontsize=7)
    fig.suptitle(f"{metric_label} at the evaluated multiples of the training length, best "
                 "first" + (f"\n{note}" if note else ""), fontsize=9)
    return fig

