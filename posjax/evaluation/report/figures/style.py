"""How every figure looks: colours, the length axis, marks, limits, and the PNG write."""

from __future__ import annotations

import io
import math

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from posjax import storage
from posjax.evaluation.report import report_words as words

# Ten distinct, saturated colours (tab10's hues with its grey replaced by black, its pink,
# olive and cyan darkened): none a reader could take for a background grey or miss on white.
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#c51b8a",
           "#000000", "#8a8a00", "#0e8a96")
MARKERS = ("o", "s", "^", "D", "v", "P", "p", "<", ">", "h")  # no "x": that is not applicable
NA_LABEL = "not applicable (x)"
DPI = 110
MISSING_FOOT = 0.045  # axes fraction of the not-applicable marks' row


def figure(width: float, height: float) -> Figure:
    """A figure whose titles, labels and legends are laid out without overlap."""
    return Figure(figsize=(width, height), layout="constrained")


def assign_colours(keys: list, order: list) -> dict:
    """{key: palette index} for the keys drawn on one axes: each key's index in `order` (the
    same key keeps its colour across panels), moved to the next free index when two keys of
    this axes would share one. Past len(PALETTE) keys, indices repeat (callers split sooner)."""
    taken, out = set(), {}
    for key in keys:
        i = order.index(key) % len(PALETTE) if key in order else 0
        for step in range(len(PALETTE)):
            if (i + step) % len(PALETTE) not in taken:
                i = (i + step) % len(PALETTE)
                break
        taken.add(i)
        out[key] = i
    return out


def length_axis(ax, lengths, image: bool = False, label: str = "evaluation length",
                also=()) -> None:
    """A log-2 x axis with one labelled tick at every evaluated length (192 too, not only
    powers of two), and no other ticks; its range covers `also` (the training lengths)."""
    lengths = sorted(set(lengths))
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [words.length_name(n, image) for n in lengths],
                  rotation=45 if len(lengths) > 5 else 0, fontsize=7)
    ax.minorticks_off()
    span = sorted(set(lengths) | set(also))
    if span:
        lo, hi = span[0], span[-1]
        pad = 2 ** (0.15 * max(1.0, math.log2(hi / lo)))
        ax.set_xlim(lo / pad, hi * pad)
    ax.set_xlabel(label, fontsize=8)


def mark_trained(ax, trained) -> None:
    """The training length(s): a grey dotted vertical line, named once."""
    for t in sorted(set(trained)):
        ax.axvline(t, color="0.45", linestyle=":", linewidth=1.2, zorder=1)
    if trained:
        ax.text(min(trained), 0.99, " trained", transform=ax.get_xaxis_transform(),
                color="0.35", fontsize=7, va="top", clip_on=True)


def mark_missing(ax, xs, colour, row: int = 0, rows: int = 1, octaves: float = 3.0) -> None:
    """Not-applicable cells: an x at the foot of the axes at their length; the row-th of `rows`
    lines with such cells on one axes is nudged sideways, by about a marker's width on an
    axis `octaves` wide (a cluster at most 0.8 octave wide), so none hides another."""
    if xs:
        step = min(octaves / 30, 0.8 / rows)
        nudge = 2 ** (step * (row - (rows - 1) / 2))
        ax.plot([x * nudge for x in xs], [MISSING_FOOT] * len(xs), linestyle="none",
                marker="x", markersize=7, markeredgewidth=1.8, color=colour,
                transform=ax.get_xaxis_transform(), clip_on=False, zorder=4)


def y_limits(ax, ylim: tuple, marked: bool) -> None:
    """Set `ylim`; where not-applicable marks are drawn (`marked`), lower it so they sit below
    the data, with no tick label down there (an x there is no value)."""
    lo, hi = ylim
    if not marked:
        ax.set_ylim(lo, hi)
        return
    foot = 2 * MISSING_FOOT  # the axes fraction the marks take
    ax.set_ylim(lo - foot * (hi - lo) / (1 - foot), hi)
    ax.set_yticks([t for t in ax.get_yticks() if lo <= t <= hi])


def missing_handle() -> Line2D:
    return Line2D([], [], linestyle="none", marker="x", markersize=7, markeredgewidth=1.8,
                  color="0.2", label=NA_LABEL)


def limits(values, pad: float = 0.08, floor: float = 0.01, clip=(None, None)) -> tuple:
    """(lo, hi) around `values` (estimates and interval ends, None skipped), padded by `pad`
    of their span, at least `floor` wide, moved (not cut) to lie within `clip`."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return (0.0, 1.0)
    lo, hi = min(vals), max(vals)
    span = max(hi - lo, floor)
    mid = (lo + hi) / 2
    lo, hi = min(lo, mid - span / 2) - pad * span, max(hi, mid + span / 2) + pad * span
    if clip[0] is not None and lo < clip[0]:
        lo, hi = clip[0], hi + clip[0] - lo
    if clip[1] is not None and hi > clip[1]:
        lo, hi = max(lo - (hi - clip[1]), clip[0] if clip[0] is not None else -math.inf), clip[1]
    return (lo, hi)


def save(fig: Figure, out_dir: str, name: str) -> str:
    """Write whole through posjax.storage: a killed run never leaves half a PNG."""
    path = storage.join(out_dir, name)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    storage.write_bytes(path, buf.getvalue())
    return path
