"""Figures of an algorithmic results folder (from results.json's derived sections):

  accuracy_<task>.png    per-token accuracy against the input length, one line per encoding
                         (solid: plain, dashed: randomized positions; one colour per
                         encoding), the mean over seeds with its 95% interval as a band;
                         dotted: the longest training length; not-applicable lengths an x
  difference_<task>.png  randomized minus plain per encoding against length, paired by seed
                         and sequence, with its band and the zero line
"""

from __future__ import annotations

from posjax.evaluation.derive import algorithmic as derive
from posjax.evaluation.report.figures import style
from posjax.evaluation.results.record import Results
from posjax.evaluation.results.results_file import section


def _colours(schemes: list) -> dict:
    return {s: style.PALETTE[i % len(style.PALETTE)] for i, s in enumerate(sorted(schemes))}


def _band(ax, xs, ys, lo, hi, colour, dashed: bool, label: str) -> None:
    ax.plot(xs, ys, color=colour, linestyle="--" if dashed else "-", linewidth=1.4,
            label=label, zorder=3)
    ax.fill_between(xs, lo, hi, color=colour, alpha=0.15, linewidth=0, zorder=2)


def _finish(ax, trained: set, ylabel: str, title: str) -> None:
    for t in trained:
        ax.axvline(t + 0.5, color="0.3", linestyle=":", linewidth=1.0, zorder=1)
    ax.set_xlabel("input length (dotted: the longest training length)", fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="best")


def _seed_note(items) -> str:
    counts = sorted({d["n_seeds"] for d in items})
    if len(counts) == 1:
        return f"{counts[0]} seed{'s' if counts[0] > 1 else ''}"
    return f"{counts[0]}-{counts[-1]} seeds"


def accuracy_figure(results: Results, task: str):
    cells = [c for c in section(results, derive.SEED_CELLS).values() if c["task"] == task]
    colours = _colours({c["scheme"] for c in cells})
    fig = style.figure(7.5, 4.4)
    ax = fig.subplots()
    for (scheme, rnd, settings) in sorted({(c["scheme"], c["randomized"], c["settings"])
                                           for c in cells}):
        mine = sorted((c for c in cells if (c["scheme"], c["randomized"], c["settings"])
                       == (scheme, rnd, settings)), key=lambda c: c["length"])
        ok = [c for c in mine if c["status"] == "ok"]
        label = f"{scheme}{' randomized' if rnd else ''}"
        if ok:
            o = [c["overall"] for c in ok]
            _band(ax, [c["length"] for c in ok], [x["accuracy"] for x in o],
                  [x["accuracy_lo"] for x in o], [x["accuracy_hi"] for x in o],
                  colours[scheme], rnd, label)
        missing = [c["length"] for c in mine if c["status"] != "ok"]
        if missing:
            ax.plot(missing, [0.0] * len(missing), "x", color=colours[scheme],
                    label=f"{label}: not applicable")
    ok_cells = [c for c in cells if c["status"] == "ok"]
    _finish(ax, {c["trained_max_input"] for c in cells}, "per-token accuracy",
            f"{task}: accuracy against length (band: 95% interval over seeds and sequences, "
            f"{_seed_note(ok_cells) if ok_cells else 'nothing scored'})")
    ax.set_ylim(-0.03, 1.03)
    return fig


def difference_figure(results: Results, task: str):
    diffs = [d for d in section(results, derive.DIFFERENCES).values()
             if d["kind"] == "length" and d["task"] == task]
    if not diffs:
        return None
    colours = _colours({d["scheme"] for d in diffs})
    fig = style.figure(7.5, 4.4)
    ax = fig.subplots()
    for scheme, settings in sorted({(d["scheme"], d["settings"]) for d in diffs}):
        mine = sorted((d for d in diffs if (d["scheme"], d["settings"]) == (scheme, settings)),
                      key=lambda d: d["length"])
        _band(ax, [d["length"] for d in mine], [d["accuracy"] for d in mine],
              [d["accuracy_lo"] for d in mine], [d["accuracy_hi"] for d in mine],
              colours[scheme], False, scheme)
    ax.axhline(0.0, color="black", linewidth=1.0, zorder=1)
    trained = {c["trained_max_input"] for c in section(results, derive.SEED_CELLS).values()
               if c["task"] == task}
    _finish(ax, trained, "accuracy: randomized - plain",
            f"{task}: randomized minus plain positions (paired by seed and sequence; band: "
            f"95% interval, {_seed_note(diffs)})")
    return fig


def write_all(out_dir: str, results: dict) -> list[str]:
    paths = []
    for task in sorted({c["task"] for c in section(results, derive.SEED_CELLS).values()}):
        paths.append(style.save(accuracy_figure(results, task), out_dir,
                                f"accuracy_{task}.png"))
        fig = difference_figure(results, task)
        if fig is not None:
            paths.append(style.save(fig, out_dir, f"difference_{task}.png"))
    return paths
