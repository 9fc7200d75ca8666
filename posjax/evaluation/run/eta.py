"""The sweep's plan, printed before any work, and its time left, updated by every cell.

Every length scores the same held-out tokens, so a cell's time (its compile and its batches)
changes slowly with its length. A cell still to score is estimated at the mean time of the
timed cells at its length; between two timed lengths, on the straight line through them in
log time over log length; past the timed lengths, at the nearest one (no trend is
extrapolated: two short lengths' difference, stretched to 8192, gave estimates 20x too long).
Schemes differ in pace (a data-dependent product or an MLP over every logit pair takes
many times plain RoPE's time at 8192), so each scheme's cells are then scaled by how that
scheme's own timed cells (any of its runs: seeds, variants) compared with those estimates at
the timed length nearest the cell's (a geometric mean of the ratios there; 1 for a scheme with
none yet: a scheme whose cost grows with the pairs, as DAPE's, is several times slower than
the rest at 2048 but not at 64, and a mean over both underestimated its 8192 cell 3x), and a
scheme's own mean at a length, where it has one, is used as it is.
Timed cells are this run's and those whose timings the results folder or a reused folder
already holds. With none, a timed probe (posjax.evaluation.run.sweep.probe: the first cell's
compile and two of its batches, and the longest length's where it is far longer) gives
whole-cell estimates, used at lengths no cell has timed yet.
"""

from __future__ import annotations

import math
from typing import Optional

from posjax.training.progress import duration


def _means(timed) -> dict[int, float]:
    """{length: mean seconds} of (length, seconds, ...) timings."""
    by_length: dict = {}
    for n, t, *_ in timed:
        by_length.setdefault(n, []).append(t)
    return {n: sum(ts) / len(ts) for n, ts in by_length.items()}


def _nearest(lengths, length: int) -> int:
    """The length among `lengths` nearest `length` in log length (the longer on a tie)."""
    return min(lengths, key=lambda n: (abs(math.log2(n / length)), -n))


class Clock:
    """The cells still to score, (scheme, length) or a bare length (one pace), and the
    (length, seconds[, scheme]) of timed cells."""

    def __init__(self, left: list, timed: list[tuple]):
        self.left = [c if isinstance(c, tuple) else (None, c) for c in left]
        self.timed = [(int(n), float(s), *rest) for n, s, *rest in timed
                      if s is not None and s > 0]
        self.total = len(self.left)
        self.probed: dict[int, float] = {}  # {length: a probe's estimate of one cell's seconds}

    def _by_length(self) -> dict[int, float]:
        """{length: mean seconds of its timed cells, or its probe estimate if none}."""
        return {**{n: s for n, s in self.probed.items() if s > 0}, **_means(self.timed)}

    def _scheme_cost(self, scheme, length: int, known: dict[int, float]) -> float:
        """One cell of `scheme` at `length`: the scheme's own mean there, else the estimate
        over all schemes scaled by the scheme's pace against it."""
        own = [t for t in self.timed if scheme is not None and t[2:] == (scheme,)]
        mine = _means(own)
        if length in mine:
            return mine[length]
        if not own:
            return self._cost(length, known)
        nearest = _nearest(mine, length)
        at = [(n, t) for n, t, _ in own if n == nearest]
        pace = sum(math.log(t / self._cost(n, known)) for n, t in at) / len(at)
        return self._cost(length, known) * math.exp(pace)

    def _cost(self, length: int, known: dict[int, float]) -> float:
        if length in known:
            return known[length]
        below = [n for n in known if n < length]
        above = [n for n in known if n > length]
        if not below or not above:
            return known[_nearest(known, length)]
        lo, hi = max(below), min(above)
        w = math.log(length / lo) / math.log(hi / lo)
        return math.exp((1 - w) * math.log(known[lo]) + w * math.log(known[hi]))

    def seconds_left(self) -> Optional[float]:
        """The estimated seconds of the cells left, None before any cell was timed or probed."""
        known = self._by_length()
        if not known:
            return None
        return sum(self._scheme_cost(scheme, n, known) for scheme, n in self.left)

    def finished(self, length: int, seconds: Optional[float], scheme=None) -> None:
        """A cell of `scheme` at `length` is done: one fewer left, its time (None: not
        scored) counted."""
        if (scheme, length) in self.left:
            self.left.remove((scheme, length))
        if seconds is not None and seconds > 0:
            self.timed.append((int(length), float(seconds),
                               *(() if scheme is None else (scheme,))))

    def progress(self) -> str:
        """'12/40 scored, ETA 8m05s' (the count of cells of this plan done, the time left)."""
        left = self.seconds_left()
        eta = "done" if not self.left else f"ETA {duration(left)}" if left is not None else ""
        return f"{self.total - len(self.left)}/{self.total} scored" + (f", {eta}" if eta else "")


def plan_line(total: int, todo: int, here: int, reused: int, sources: list[str],
              not_applicable: int, clock: Clock, out_dir: str) -> str:
    """The one line eval prints before any work."""
    done = f"{here + reused} done"
    if here or reused:
        parts = ([f"{here} in {out_dir}"] if here else []) + (
            [f"{reused} reused from {', '.join(sources)}"] if reused else [])
        done += f" ({', '.join(parts)})"
    left = clock.seconds_left()
    if not todo:
        when = "nothing to score"
    elif left is None:
        when = "time: estimated after the first cell"
    elif clock.timed:
        when = f"about {duration(left)} (at the pace of {len(clock.timed)} timed cells)"
    else:
        at = ", ".join(f"L={n}" for n in sorted(clock.probed))
        when = f"about {duration(left)} (from a timed probe at {at})"
    return (f"eval: plan: {total} cells: {todo} to score, {done}, {not_applicable} not "
            f"applicable; {when}")


def timings(cells) -> list[tuple]:
    """(length, seconds, scheme) of the scored cells among `cells` (the whole cell's time
    where it was recorded, its scoring time otherwise)."""
    out = []
    for c in cells:
        if c["status"] == "ok":  # cell_s: the algorithmic sweep's (record.OkAlgorithmicCell)
            seconds = c["cell_s"] if "cell_s" in c else c["wall_s"]
            if seconds:
                out.append((c["length"], seconds, c.get("scheme")))
    return out
