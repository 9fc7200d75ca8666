"""The answer of a recovery study run with several continued-training seeds.

    answers = recovery_seeds.answer(results)      # results.json of a recovery sweep
    recovery_seeds.write(out_dir, results)          # recovery_answer.{json,md}, recovery_seeds.png

For every (source, length, schedule) whose recovery curves include a `truncate` cell at that
length (the same tokens read in windows of the trained length: the model's own level on
these tokens), and for every method continued from it:
  * its accuracy and loss at every step, averaged over the seeds, with the evaluator's 95%
    interval (intervals.estimate: seeds resampled, then clusters, or a t interval over seed
    means where that is wider; under 20 clusters a cluster jackknife plus the seeds'
    variance), each number naming its interval;
  * its difference from truncate and from the hierarchical curve at every step, paired by
    seed and token (the same rows in both cells) under the same draws;
  * the first step at which it comes within `within` (1 point) of truncate: by the seed-mean
    estimate, and by the whole interval (its lower end at or above -within); None = not within
    the steps measured;
  * where a `truncate` curve was trained (the control: the same continued training at the
    trained length, read in its windows), its difference from that curve at the same step,
    paired by seed and token, and the first step within `within` of it: what is left once the
    new text's own gain (adapting to its domain) is on both sides.
Step 0 (zero-shot) is one cell for every seed, so there it counts as one seed.

Everything is computed from the per-row sums in results.json (`rows`: correct, count, loss,
cluster), so it can be recomputed from the file alone. recovery_seeds.png: accuracy against
steps, one colour per method with its band, truncate as a horizontal band.
"""

from __future__ import annotations

import functools
import io
import json
import re
from typing import Optional

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from posjax import storage
from posjax.evaluation.stats import intervals
from posjax.evaluation.results import results_file
from posjax.evaluation.results.results_file import section
from posjax.evaluation.derive.seeds import has_rows

WITHIN = 0.01  # "close to its results at the original length": within 1 point of truncate
DRAWS = intervals.DRAWS  # the same draws as every other interval of results.json
ANSWER_JSON, ANSWER_MD, FIGURE = "recovery_answer.json", "recovery_answer.md", "recovery_seeds.png"


def _groups(results: dict) -> dict:
    """{(source, length, schedule): {label: {seed: curve}}} of the recovery section."""
    out: dict = {}
    for curve in section(results, "recovery").values():
        key = (curve["source"], int(curve["length"]), curve["schedule"])
        # seed: absent in curves recorded before it (record.Curve)
        out.setdefault(key, {}).setdefault(curve["label"], {})[curve.get("seed")] = curve
    return out


def _same_rows(a: dict, b: dict) -> bool:
    return a["rows"]["count"] == b["rows"]["count"] and a["rows"]["cluster"] == b["rows"]["cluster"]


def _reference(results: dict, source: str, method: str, length: int, like: dict) -> Optional[dict]:
    """The source's `method` cell at `length` scoring the same rows as `like` (None if none)."""
    for cell in results["cells"].values():
        if (has_rows(cell) and cell["run"] == source and cell["label"] == method
                and cell["length"] == length and (like is None or _same_rows(cell, like))):
            return cell
    return None


def _sums(cell: dict, index: np.ndarray, clusters: int) -> tuple[np.ndarray, np.ndarray]:
    rows = cell["rows"]
    return (np.bincount(index, weights=np.asarray(rows["correct"], float), minlength=clusters),
            np.bincount(index, weights=np.asarray(rows["loss"], float), minlength=clusters))


class _Draws:
    """The clusters of a group's rows (every cell of a group scores the same rows) and the
    draws and seed of intervals.estimate, shared by every number of the group, so differences
    are paired under the same draws."""

    def __init__(self, cluster: list, count: list, draws: int, seed: int):
        _, self.index = np.unique(np.asarray(cluster), return_inverse=True)
        self.clusters = int(self.index.max()) + 1
        self.count = np.bincount(self.index, weights=np.asarray(count, float),
                                 minlength=self.clusters)
        self.draws, self.seed = draws, seed

    def mean(self, sums: np.ndarray) -> tuple[float, float, float, str]:
        """sums [k seeds, clusters] per-seed numerators (a difference: already subtracted,
        the denominators being the same rows' counts) -> (seed mean of sum / count, lo, hi,
        interval name), by the evaluator's rules (intervals.estimate: seeds, then clusters)."""
        count = np.broadcast_to(self.count, sums.shape)
        e = intervals.estimate([(1.0, sums, count)], draws=self.draws, seed=self.seed)
        return e["value"], e["lo"], e["hi"], e["interval"]


def _number(draws: _Draws, correct: np.ndarray, loss: np.ndarray) -> dict:
    acc, acc_lo, acc_hi, name = draws.mean(correct)
    los, los_lo, los_hi, _ = draws.mean(loss)
    return {"accuracy": acc, "accuracy_lo": acc_lo, "accuracy_hi": acc_hi,
            "loss": los, "loss_lo": los_lo, "loss_hi": los_hi, "interval": name}


def _difference(draws: _Draws, correct: np.ndarray, loss: np.ndarray) -> dict:
    """_number of per-seed, per-cluster differences, marked identical (no interval: exactly
    0) when the two sides scored every cluster alike (the same weights: step 0, or a first
    step taken at a learning rate of 0)."""
    out = _number(draws, correct, loss)
    out["identical"] = bool(not np.any(correct) and not np.any(loss))
    return out


def _is_hierarchical(label: str) -> bool:
    return label.startswith("hierarchical")


CONTROL = "truncate"  # a truncate curve: recovery.py's control


def _paired(d: _Draws, mine: tuple, theirs: tuple) -> Optional[dict]:
    """_difference of two curves' cells at one step, paired by seed (step 0: the one zero-shot
    cell each); None when no seed is on both sides."""
    seeds, correct, loss = mine
    o_seeds, o_correct, o_loss = theirs
    pair = [(i, o_seeds.index(s)) for i, s in enumerate(seeds) if s in o_seeds]
    if not pair and len(seeds) == 1 and len(o_seeds) == 1:
        pair = [(0, 0)]
    if not pair:
        return None
    a, b = zip(*pair)
    return dict(_difference(d, correct[list(a)] - o_correct[list(b)],
                            loss[list(a)] - o_loss[list(b)]), seeds=len(pair))


def _first_within(entry: dict, steps: list, field: str, key: str, within: float):
    """The first of `steps` whose `field` difference has its `key` at or above -within (None:
    none; a step without that difference, e.g. no seed paired, does not count)."""
    return next((s for s in steps if field in entry["steps"][str(s)]
                 and entry["steps"][str(s)][field][key] >= -within), None)


def _group_answer(results: dict, source: str, length: int, schedule: str, curves: dict, *,
                  within: float, draws: int, seed: int) -> Optional[dict]:
    some = next((results["cells"].get(k) for by_seed in curves.values()
                 for c in by_seed.values() for k in c["cells"].values()
                 if has_rows(results["cells"].get(k))), None)
    if some is None:
        return None
    truncate = _reference(results, source, "truncate", length, some)
    if truncate is None:
        return None
    d = _Draws(truncate["rows"]["cluster"], truncate["rows"]["count"], draws, seed)
    t_correct, t_loss = _sums(truncate, d.index, d.clusters)
    out = {"source": source, "length": length, "schedule": schedule, "within": within,
           "truncate": _number(d, t_correct[None], t_loss[None]),
           "masked_tokens": int(d.count.sum()), "clusters": d.clusters, "methods": {}}
    trained = some["trained_length"]
    original = _reference(results, source, "as_is", trained, None) if trained else None
    if original is not None:  # the same tokens in rows of the trained length (other rows)
        out["original"] = dict(intervals.summarize(original["rows"], seed=seed),
                               length=int(trained))
    per_method: dict = {}  # label -> step -> (seeds, correct [k, C], loss [k, C])
    for label, by_seed in curves.items():
        steps: dict = {}
        for step in sorted({int(s) for c in by_seed.values() for s in c["cells"]}):
            keys = {}
            for k, c in sorted(by_seed.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
                key = c["cells"].get(str(step))
                cell = results["cells"].get(key) if key else None
                if has_rows(cell) and _same_rows(cell, truncate) and key not in keys.values():
                    keys[k] = key
            if keys:
                sums = [_sums(results["cells"][key], d.index, d.clusters) for key in keys.values()]
                steps[step] = (list(keys), np.array([s[0] for s in sums]),
                               np.array([s[1] for s in sums]))
        per_method[label] = steps
        out["methods"][label] = {
            "seeds": sorted(k for k in by_seed if k is not None),
            "tokens_per_step": sorted({c.get("tokens_per_step") for c in by_seed.values()
                                       if c.get("tokens_per_step")}),
            "steps": {}}
    hier = next((label for label in per_method if _is_hierarchical(label)), None)
    control = CONTROL if CONTROL in per_method else None
    for label, steps in per_method.items():
        entry = out["methods"][label]
        for step, (seeds, correct, loss) in steps.items():
            number = _number(d, correct, loss)
            number["seeds"] = len(seeds)
            number["minus_truncate"] = _difference(d, correct - t_correct[None],
                                                   loss - t_loss[None])
            for field, other in (("minus_hierarchical", hier), ("minus_control", control)):
                if other is not None and label != other and step in per_method[other]:
                    diff = _paired(d, steps[step], per_method[other][step])
                    if diff is not None:
                        number[field] = diff
            entry["steps"][str(step)] = number
        measured = sorted(int(s) for s in entry["steps"])
        entry["max_step"] = max(measured) if measured else None
        for name, field in (("within", "minus_truncate"), ("within_control", "minus_control")):
            if field == "minus_control" and (control is None or label == control):
                continue
            for suffix, key in (("estimate", "accuracy"), ("interval", "accuracy_lo")):
                entry[f"{name}_{suffix}"] = _first_within(entry, measured, field, key, within)
    out["hierarchical"], out["control"] = hier, control
    return out


def answer(results: dict, *, within: float = WITHIN, draws: int = DRAWS,
           seed: Optional[int] = None) -> list[dict]:
    """One answer per (source, length, schedule) that has a truncate cell (see above)."""
    seed = results_file.interval_seed(results) if seed is None else seed
    out = []
    for (source, length, schedule), curves in sorted(_groups(results).items()):
        a = _group_answer(results, source, length, schedule, curves, within=within,
                          draws=draws, seed=seed)
        if a is not None:
            out.append(a)
    return out


_ci = functools.partial(results_file.interval_text, name="accuracy", missing="n/a")


def _first(step: Optional[int], entry: dict) -> str:
    return str(step) if step is not None else f"not within {entry.get('max_step')} steps"


def _interval_names(node) -> set:
    """Every number's `interval` name inside an answer (nested dicts)."""
    if not isinstance(node, dict):
        return set()
    names = {node["interval"]} if isinstance(node.get("interval"), str) else set()
    return names.union(*(_interval_names(v) for v in node.values()))


def _summarized(names: set) -> list[str]:
    """Interval names with their t degrees of freedom folded: 'cluster jackknife + seed
    variance t(1.0)', '... t(2.0)' -> '... t(df), df 1.0-2.0' (one header line, not eight)."""
    by_kind: dict = {}
    for name in names:
        m = re.fullmatch(r"(.*) t\(([0-9.]+)\)", name)
        if m:
            by_kind.setdefault(m.group(1), []).append(m.group(2))
        else:
            by_kind.setdefault(name, [])
    out = []
    for kind, dfs in sorted(by_kind.items()):
        if not dfs:
            out.append(kind)
            continue
        values = sorted(float(x) for x in dfs)
        span = f"{values[0]:g}" if values[0] == values[-1] else f"{values[0]:g}-{values[-1]:g}"
        out.append(f"{kind} t(df), df {span}")
    return out


def markdown(answers: list[dict]) -> str:
    names = _summarized(set().union(*(_interval_names(a) for a in answers)))
    lines = ["# Recovery: continued training at the new length, over seeds", "",
             f"Accuracy [95% interval: {'; '.join(names) or 'none'}]; differences are paired "
             "by seed and token. Step 0 is the zero-shot cell (one for every seed).", ""]
    for a in answers:
        within = a["within"] * 100
        lines += [f"## {a['source']} at length {a['length']} ({a['schedule']} learning rate)", "",
                  f"truncate (the same {a['masked_tokens']} masked tokens in windows of the "
                  f"trained length, {a['clusters']} clusters): {_ci(a['truncate'])}"]
        if "original" in a:
            lines.append(f"as_is at the trained length {a['original']['length']} (the same "
                         f"tokens, rows of that length): {_ci(a['original'])}")
        control = a.get("control")
        head = (f"| method | seeds | tokens/step | first step within {within:g} point of "
                "truncate (estimate) | (whole interval) |")
        if control:
            head += " of the control at that step (estimate) | (whole interval) |"
        lines += ["", head, "|---|---:|---:|---:|---:|" + ("---:|---:|" if control else "")]
        for label, e in a["methods"].items():
            row = (f"| {label} | {len(e['seeds']) or 1} | "
                   f"{', '.join(map(str, e['tokens_per_step'])) or 'n/a'} | "
                   f"{_first(e['within_estimate'], e)} | {_first(e['within_interval'], e)} |")
            if control:
                row += (" (the control) | |" if label == control else
                        f" {_first(e.get('within_control_estimate'), e)} | "
                        f"{_first(e.get('within_control_interval'), e)} |")
            lines.append(row)
        steps = sorted({int(s) for e in a["methods"].values() for s in e["steps"]})
        tables = [("accuracy", None, False), ("minus truncate", "minus_truncate", True),
                  (f"minus {a['hierarchical']}", "minus_hierarchical", True)]
        if control:
            tables.append(("minus the control (truncate's curve) at the same step",
                           "minus_control", True))
        for title, field, signed in tables:
            lines += ["", f"### {title}", "",
                      "| method | " + " | ".join(str(s) for s in steps) + " |",
                      "|---|" + "---:|" * len(steps)]
            for label, e in a["methods"].items():
                if (field == "minus_hierarchical" and label == a["hierarchical"]) or (
                        field == "minus_control" and label == control):
                    continue
                cells = []
                for s in steps:
                    n = e["steps"].get(str(s))
                    n = n if field is None or n is None else n.get(field)
                    cells.append(_ci(n, signed=signed) + (f" ({n['seeds']} seeds)"
                                 if field is None and n and n["seeds"] > 1 else ""))
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def figure(answers: list[dict]) -> Optional[bytes]:
    """PNG of accuracy against steps per answer (a panel each); None when there is none."""
    if not answers:
        return None
    fig = Figure(figsize=(7.5 * len(answers), 5))
    axes = fig.subplots(1, len(answers), squeeze=False)
    for a, ax in zip(answers, axes[0]):
        t = a["truncate"]
        ax.axhspan(t["accuracy_lo"], t["accuracy_hi"], color="0.6", alpha=0.35, lw=0)
        ax.axhline(t["accuracy"], color="0.3", lw=1.2, ls="--",
                   label=f"truncate ({t['accuracy']:.3f})")
        colours = colormaps["tab10"].colors
        for (label, e), colour in zip(a["methods"].items(), colours):
            steps = sorted(int(s) for s in e["steps"])
            n = [e["steps"][str(s)] for s in steps]
            if not steps:
                continue
            ax.fill_between(steps, [x["accuracy_lo"] for x in n], [x["accuracy_hi"] for x in n],
                            color=colour, alpha=0.2, lw=0)
            seeds = max(x["seeds"] for x in n)
            ax.plot(steps, [x["accuracy"] for x in n], "o-", color=colour, ms=3,
                    label=f"{label} ({seeds} seed{'s' if seeds > 1 else ''})")
        all_steps = sorted({int(s) for e in a["methods"].values() for s in e["steps"]})
        ax.set_xticks(all_steps)
        ax.set_xlabel(f"continued-training steps at {a['length']} ({a['schedule']} learning rate)")
        ax.set_ylabel("MLM accuracy")
        ax.set_title(f"{a['source']}: back to the trained length's level?", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("bands: 95% interval (seeds, then clusters); grey: truncate", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def write(out_dir: str, results: Optional[dict]) -> list[dict]:
    """recovery_answer.json / .md and recovery_seeds.png in `out_dir` (each written whole);
    nothing when no curve has its truncate cell. Returns the answers."""
    answers = answer(results) if results else []
    if answers:
        storage.write_text(storage.join(out_dir, ANSWER_JSON), json.dumps(answers, indent=1))
        storage.write_text(storage.join(out_dir, ANSWER_MD), markdown(answers))
        png = figure(answers)
        if png is not None:
            storage.write_bytes(storage.join(out_dir, FIGURE), png)
    return answers
