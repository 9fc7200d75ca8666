"""The paired difference from the --baseline method against length (results.json
'differences': cell minus the baseline's cell of the same run and length, same rows).

One line per (run, method) with its 95% paired interval as a band and a black zero line: a
band that covers zero is no measurable difference. Panels as in curves (one per run, split
past MAX_PER_AXES lines); a method not applicable at a length is an x there.
"""

from __future__ import annotations

from posjax.evaluation.report.figures import curves
from posjax.evaluation.report.figures.lines import Line, difference_points


def draw(lines: list[Line], differences: dict, metric: str = "accuracy"):
    """The Figure of `differences` ({cell key: paired difference},
    lines.baseline_differences), or None when none belongs to `lines`."""
    if not differences:
        return None
    runs = {line.run for line in lines if difference_points(line, differences, metric)}
    keys = {k for line in lines for k in line.keys}
    baselines = sorted({d["baseline"] for k, d in differences.items() if k in keys})
    drawn = [line for line in lines if line.run in runs and line.label not in baselines
             and (difference_points(line, differences, metric) or line.missing)]
    if not drawn:
        return None
    name = "accuracy" if metric == "accuracy" else "MLM loss"
    return curves.draw(
        drawn, [(lambda line: difference_points(line, differences, metric),
                 f"{name} minus {', '.join(baselines)}")],
        f"{name}: each method minus {', '.join(baselines)} of the same run (paired, same "
        "rows)\nband: 95% interval; a band that covers 0: no measurable difference",
        xlabel="evaluation length", zero=True)
