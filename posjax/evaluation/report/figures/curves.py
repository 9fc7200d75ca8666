"""A metric against length, one line per (run, method), its 95% interval as a band.

Up to MAX_PER_AXES lines share one axes (one axes per metric, one legend). Past that, bands
merge, so the figure becomes small multiples of the first metric: one panel per run with
several methods (legend: the methods), one panel for the runs with a single method (legend:
the runs), each split into panels of at most MAX_PER_AXES lines (a method and its +logn twin stay in one
panel); every panel on the same
y limits, with its own legend. A method keeps its colour and marker across panels where
the palette allows; not-applicable cells are an x below the data.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from posjax.evaluation.report.figures import style
from posjax.evaluation.report.figures.lines import Line, Point, seed_text, seeds

MAX_PER_AXES = 6
PANEL_COLUMNS = 3


def plain(metric: str) -> Callable[[Line], list[Point]]:
    return lambda line: line.points(metric)


def draw_line(ax, points: list[Point], colour, marker: str, label: Optional[str]) -> None:
    ax.plot([p.x for p in points], [p.y for p in points], marker=marker, markersize=4,
            linewidth=1.6, color=colour, label=label, zorder=3)
    banded = [p for p in points if p.lo is not None and p.hi is not None]
    if banded:
        ax.fill_between([p.x for p in banded], [p.lo for p in banded], [p.hi for p in banded],
                        color=colour, alpha=0.15, linewidth=0, zorder=2)


def _chunks(items: list, size: int) -> list[list]:
    """`items` in ceil(n / size) consecutive chunks of near-equal length."""
    n = max(1, math.ceil(len(items) / size))
    per = math.ceil(len(items) / n)
    return [items[i:i + per] for i in range(0, len(items), per)]


def pair_key(line: Line) -> tuple:
    """A method and its +logn twin share a key: they stay in one panel."""
    return (line.run, line.label.replace("+logn", ""))


def _pair_chunks(group: list[Line], size: int) -> list[list[Line]]:
    """`group` in consecutive chunks of at most `size` lines (a pair may exceed a size of 1),
    never splitting a method from its +logn twin: as even as the pairs allow, else as full."""
    units: dict = {}
    for line in group:
        units.setdefault(pair_key(line), []).append(line)
    size = max(size, 2)
    n = max(1, math.ceil(len(group) / size))

    def pack(capacity: int) -> list[list[Line]]:
        out, current = [], []
        for unit in units.values():
            if current and len(current) + len(unit) > capacity:
                out.append(current)
                current = []
            current = current + unit
        return out + [current]

    even = pack(math.ceil(len(group) / n))
    return even if len(even) <= n else pack(size)


def panels(lines: list[Line]) -> list[tuple[str, list[Line], str]]:
    """(title, lines, legend field) per panel: each run with several methods, then the runs
    with one method pooled, each split to at most MAX_PER_AXES lines."""
    by_run: dict = {}
    for line in lines:
        by_run.setdefault(line.run, []).append(line)
    groups = [(run, group, "label") for run, group in by_run.items() if len(group) > 1]
    single = [group[0] for group in by_run.values() if len(group) == 1]
    if single:
        labels = sorted({line.label for line in single})
        groups.append((f"one method per run: {', '.join(labels)}", single, "run"))
    out = []
    for title, group, legend in groups:
        # a run split over panels keeps its first method (as_is, with its +logn twin) in
        # each, as the reference
        head = ([line for line in group if pair_key(line) == pair_key(group[0])]
                if legend == "label" and len(group) > MAX_PER_AXES else [])
        rest = [line for line in group if line not in head]
        parts = [head + part for part in (_pair_chunks(rest, MAX_PER_AXES - len(head))
                                          if legend == "label" else
                                          _chunks(rest, MAX_PER_AXES - len(head)))]
        for i, part in enumerate(parts):
            suffix = f" ({i + 1}/{len(parts)})" if len(parts) > 1 else ""
            out.append((title + suffix, part, legend))
    return out


def seed_words(lines: list[Line]) -> str:
    return seed_text([c for line in lines for c in line.cells])


def _draw_panel(ax, lines: list[Line], values, legend: str, order: list, markers: dict,
                title: Optional[str], seeded: bool = False) -> None:
    """seeded: label each line with its seeds (when they differ between lines)."""
    colours = style.assign_colours([getattr(ln, legend) for ln in lines], order)
    marked = [line for line in lines if line.missing]
    ends = [n for line in lines for n in line.lengths() + [line.trained]]
    octaves = math.log2(max(ends) / min(ends)) + 1 if ends else 3.0
    for line in lines:
        key = getattr(line, legend)
        colour = style.PALETTE[colours[key]]
        draw_line(ax, values(line), colour, markers[key],
                  f"{key} ({seed_words([line])})" if seeded else key)
        if line.missing:
            style.mark_missing(ax, [c["length"] for c in line.missing], colour,
                               marked.index(line), len(marked), octaves)
    if title:
        ax.set_title(title, fontsize=8)


def _legend(target, source, lines: list[Line], **kw) -> None:
    """On `target` (an axes or the figure): the lines drawn on axes `source`, and the
    not-applicable marker when any of `lines` has such a cell."""
    handles, labels = source.get_legend_handles_labels()
    if any(line.missing for line in lines):
        handles.append(style.missing_handle())
        labels.append(style.NA_LABEL)
    target.legend(handles, labels, fontsize=7, **kw)


def _finish(ax, lines: list[Line], ylabel: str, xlabel: str, zero: bool) -> None:
    style.length_axis(ax, [n for line in lines for n in line.lengths()],
                      any(line.image for line in lines), xlabel,
                      also=[line.trained for line in lines])
    style.mark_trained(ax, {line.trained for line in lines})
    if zero:
        ax.axhline(0.0, color="black", linewidth=1.0, zorder=1)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(alpha=0.3)


def draw(lines: list[Line], metrics: list[tuple], title: str, *, xlabel: str,
         clip=(None, None), floor: float = 0.01, zero: bool = False,
         panels_title: Optional[str] = None, note: str = ""):
    """The figure of `lines`: metrics is [(values(line) -> points, y label), ...]; small
    multiples (of the first metric only, titled `panels_title`, by default `title`) past
    MAX_PER_AXES lines; `note` is a second title line. The y axis fits the values and their intervals (at least `floor`
    wide, within `clip`). Returns the Figure."""
    names = [line.name for line in lines]
    # one seed count for all: said once in the title; otherwise in every legend entry
    seeded = len({seeds(c).n for line in lines for c in line.cells}) > 1
    if not seeded:
        title = f"{title}, {seed_words(lines)} per point"
        panels_title = panels_title and f"{panels_title}, {seed_words(lines)} per point"
    if note:  # the lines not drawn (none of their cells applies), named once
        title, panels_title = f"{title}\n{note}", panels_title and f"{panels_title}\n{note}"
    if len(lines) <= MAX_PER_AXES:
        fig = style.figure(5.2 * len(metrics) + 1.8, 4.2)
        axes = fig.subplots(1, len(metrics), squeeze=False)[0]
        markers = {n: style.MARKERS[i % len(style.MARKERS)] for i, n in enumerate(names)}
        for ax, (values, ylabel) in zip(axes, metrics):
            _draw_panel(ax, lines, values, "name", names, markers, None, seeded)
            _finish(ax, lines, ylabel, xlabel, zero)
            style.y_limits(ax, style.limits(_values(lines, values), floor=floor, clip=clip),
                           any(line.missing for line in lines))
        _legend(fig, axes[0], lines, loc="outside lower center", ncols=min(3, len(lines) + 1))
        fig.suptitle(title, fontsize=9)
        return fig
    values, ylabel = metrics[0]
    parts = panels(lines)
    cols = min(PANEL_COLUMNS, len(parts))
    rows = math.ceil(len(parts) / cols)
    fig = style.figure(4.9 * cols, 3.1 * rows + 0.4)
    grid = fig.subplots(rows, cols, squeeze=False)
    order = list(dict.fromkeys([line.label for _, part, f in parts if f == "label"
                                for line in part] + [line.run for _, part, f in parts
                                                     if f == "run" for line in part]))
    markers = {k: style.MARKERS[i % len(style.MARKERS)] for i, k in enumerate(order)}
    ylim = style.limits(_values(lines, values), floor=floor, clip=clip)
    marked = any(line.missing for line in lines)
    for ax, (panel_title, part, legend) in zip(grid.flat, parts):
        _draw_panel(ax, part, values, legend, order, markers, panel_title, seeded)
        _finish(ax, part, ylabel, xlabel, zero)
        style.y_limits(ax, ylim, marked)
        _legend(ax, ax, part, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    for ax in list(grid.flat)[len(parts):]:
        ax.set_visible(False)
    fig.suptitle(panels_title or title, fontsize=10)
    return fig


def _values(lines: list[Line], values) -> list:
    return [v for line in lines for p in values(line) for v in (p.y, p.lo, p.hi)]
