"""The recovery section of results.md: each continued-training curve, and, where several
extension methods were continued from the same run at the same length with the same seed and
schedule, their paired difference at every step (the same rows, so the interval is that of the
difference). Across seeds: posjax.evaluation.report.recovery_seeds."""

from __future__ import annotations

from posjax.evaluation.stats import intervals
from posjax.evaluation.results.results_file import interval_seed, interval_text, section
from posjax.evaluation.derive.seeds import has_rows


def _which(curve: dict) -> str:
    """', seed 1, constant learning rate' for curves with a seed ('' for the older ones, which
    the headings call '1 seed'; posjax.evaluation.results.record.Curve: seed, schedule and
    tokens_per_step are recorded together). A curve is one seed's run: seeds meet in
    recovery_seeds."""
    if "seed" not in curve:
        return ""
    return (f", seed {curve['seed']}, {curve['schedule']} learning rate, "
            f"{curve['tokens_per_step']} tokens/step")


def _curve_table(results: dict, curve: dict) -> list[str]:
    lines = [f"## Recovery: {curve['source']} at length {curve['length']}, continued "
             f"training with {curve['label']}{_which(curve) or ' (1 seed)'}", "", "| steps | accuracy | loss |",
             "|---:|---:|---:|"]
    for step in sorted(curve["cells"], key=int):
        c = results["cells"].get(curve["cells"][step])  # None: not evaluated (yet)
        if has_rows(c):
            lines.append(f"| {step} | {interval_text(c['overall'], 'accuracy')} | "
                         f"{interval_text(c['overall'], 'loss')} |")
        elif c is not None:
            lines.append(f"| {step} | n/a | n/a |")
    return lines + [""]


def _paired_table(results: dict, first: dict, other: dict, seed: int) -> list[str]:
    lines = [f"## Recovery: {first['label']} minus {other['label']} ({first['source']}, "
             f"length {first['length']}{_which(first) or ''}, paired, same rows"
             f"{'' if _which(first) else ', 1 seed'})", "",
             "| steps | accuracy | loss |", "|---:|---:|---:|"]
    for step in sorted(set(first["cells"]) & set(other["cells"]), key=int):
        a = results["cells"].get(first["cells"][step])
        b = results["cells"].get(other["cells"][step])
        if not (has_rows(a) and has_rows(b)):
            continue
        try:
            d = intervals.paired(a["rows"], b["rows"], seed=seed)
        except ValueError:  # not the same rows: no paired difference to show
            continue
        lines.append(f"| {step} | {interval_text(d, 'accuracy', True)} | "
                     f"{interval_text(d, 'loss', True)} |")
    return lines + [""]


def recovery_markdown(results: dict) -> list[str]:
    seed = interval_seed(results)
    curves = [curve for _, curve in sorted(section(results, "recovery").items())]
    lines = []
    for curve in curves:
        lines += _curve_table(results, curve)
    groups: dict = {}
    for curve in curves:
        groups.setdefault((curve["source"], curve["length"], curve.get("seed"),
                           curve.get("schedule")), []).append(curve)
    for group in groups.values():
        for other in group[1:]:
            lines += _paired_table(results, group[0], other, seed)
    return lines
