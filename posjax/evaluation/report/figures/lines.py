"""What a figure draws: one Line per (run, method label), built from the cells of results.json.

A Line holds its evaluated cells (status 'ok', by length) and its not-applicable cells
(any other status), so a figure can mark the latter instead of leaving a gap. Point is one
drawn value: (x, estimate, lo, hi), lo/hi None where the cell carries no interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from posjax import schema
from posjax.evaluation.report import report_words as words
from posjax.evaluation.derive import seeds as seeds_lib
from posjax.evaluation.results.record import Results
from posjax.evaluation.results.results_file import cell_seeds, method_order, section, seeds_words

NOPE = "none"  # position.name of a run without positions: the ranking's reference level


class Point(NamedTuple):
    x: int
    y: float
    lo: Optional[float]
    hi: Optional[float]


class Seeds(NamedTuple):
    n: int
    seeds: tuple
    interval: Optional[str]

    def text(self) -> str:
        return seeds_words(self.n)


def seeds(cell: dict) -> Seeds:
    """How many training seeds a cell pools, which ones, and how its interval was made. Every
    evaluated cell and every seed group's cell says so (posjax.evaluation.results.record); a run's
    own not-applicable cell is its one training seed, without an interval."""
    n, listed = cell_seeds(cell)
    return Seeds(n, tuple(listed), cell.get("interval"))


def seed_text(cells: list[dict]) -> str:
    """'1 seed', '3 seeds' or '1-3 seeds': the training seeds behind `cells`."""
    counts = sorted({seeds(c).n for c in cells}) or [1]
    if len(counts) == 1:
        return Seeds(counts[0], (), None).text()
    return f"{counts[0]}-{counts[-1]} seeds"


@dataclass
class Line:
    run: str
    label: str
    trained: int
    image: bool
    position: Optional[str]  # the run's position.name (scheme when the config is absent)
    order: tuple
    cells: list = field(default_factory=list)  # status 'ok', sorted by length
    keys: list = field(default_factory=list)  # the results.json key of each of `cells`
    missing: list = field(default_factory=list)  # not-applicable cells, sorted by length

    @property
    def name(self) -> str:
        return f"{self.run} / {self.label}"

    def lengths(self) -> list[int]:
        return sorted({c["length"] for c in self.cells + self.missing})

    def cell_at(self, length: int) -> Optional[dict]:
        """The cell (ok or not applicable) at `length`, or None where none was evaluated."""
        for c in self.cells + self.missing:
            if c["length"] == length:
                return c
        return None

    def points(self, metric: str) -> list[Point]:
        return [point(c["length"], c["overall"], metric) for c in self.cells]


def point(x: int, numbers: dict, metric: str) -> Point:
    return Point(x, numbers[metric], numbers[f"{metric}_lo"], numbers[f"{metric}_hi"])


def _position(results: Results, run_key: str, cell: dict) -> Optional[str]:
    """The run's position.name; its scheme where its config does not name one."""
    return schema.given(results["runs"][run_key]["config"], "position.name") or cell["scheme"]


def first_run(results: Results, key: str, cell: dict) -> str:
    """The run key a cell reads its run's facts from: a seed group's cell (MLM: its runs;
    task: its group) reads its first run; a run's own cell is keyed by the run."""
    if "runs" in cell:
        return cell["runs"][0]
    if "group" in cell:
        return results["groups"][cell["group"]]["runs"][0]
    return key.partition("|")[0]


def collect(results: dict, cells: dict, keep) -> list[Line]:
    """One Line per (run, label) over `cells` ({key: cell}) for which keep(key, cell) holds,
    sorted by run then method order."""
    lines: dict = {}
    for key, c in cells.items():
        if not keep(key, c):
            continue
        run_key = first_run(results, key, c)
        line = lines.setdefault((c["run"], c["label"]), Line(
            c["run"], c["label"], c["trained_length"], words.is_image_run(results, run_key),
            _position(results, run_key, c), method_order(c)))
        if c["status"] == "ok":
            line.cells.append(c)
            line.keys.append(key)
        else:
            line.missing.append(c)
    out = sorted(lines.values(), key=lambda ln: (ln.run, ln.order))
    for line in out:
        pairs = sorted(zip(line.cells, line.keys), key=lambda p: p[0]["length"])
        line.cells, line.keys = [p[0] for p in pairs], [p[1] for p in pairs]
        line.missing.sort(key=lambda c: c["length"])
    return out


def mlm_lines(results: dict, skip_runs=frozenset()) -> list[Line]:
    """The sweep's lines: every run but `skip_runs` (continued-training checkpoints), without
    the shuffled-positions reliance check (one number, not a curve). Where results.json
    groups runs by training seed ('seed_cells'), one line per group: the mean over its
    seeds."""
    def keep(key, c):
        return key.partition("|")[0] not in skip_runs and not c["params"].get(
            "shuffle_positions")  # an optional parameter (record.Params)

    return collect(results, section(results, "seed_cells") or results["cells"], keep)


def not_applicable_note(lines: list[Line]) -> str:
    """'not applicable (not drawn): run: a, b; run2: c' for the lines without any evaluated
    cell ('' when none): a figure names them once instead of drawing rows of x marks (their
    reasons: results.md)."""
    by_run: dict = {}
    for line in lines:
        if not line.cells and line.missing:
            by_run.setdefault(line.run, []).append(line.label)
    if not by_run:
        return ""
    return "not applicable (not drawn; reasons in results.md): " + "; ".join(
        f"{run}: {', '.join(labels)}" for run, labels in by_run.items())


def task_lines(results: dict, task: str) -> list[Line]:
    """The task's lines; a seed group of several runs ('task_seed_cells') is one line in
    place of its runs' lines."""
    return collect(results, seeds_lib.grouped_tasks(results), lambda key, c: c["task"] == task)


def baseline_differences(results: Results) -> dict:
    """{cell key: its paired difference from the --baseline method}: results.json keys them
    'a - b', with kind 'baseline' and the cell in 'a'."""
    out = {}
    for d in section(results, "differences").values():
        if d["kind"] == "baseline":
            out[d["a"]] = d
    return out


def difference_points(line: Line, differences: dict, metric: str) -> list[Point]:
    """The paired difference from the baseline ({cell key: d}, baseline_differences) at each
    length where there is one."""
    return [point(c["length"], differences[k], metric)
            for c, k in zip(line.cells, line.keys) if k in differences]
