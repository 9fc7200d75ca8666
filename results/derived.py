"""Intervals the evaluator's own tables do not print, recomputed from the committed per-row
sums. Run from the repository root:

    python -m results.derived          # rewrites results/*/derived.md

- schemes_seeds: each seed group and method at 512, 2048 and 8192 against itself at 64, paired
  by seed and by document (intervals.paired_clusters_seeds); the highest run and method at 512
  and at 8192 against every other there, every run and method at 8192 against NoPE, and
  RoPE against RoPE on values at every length, paired by seed and token (the 'runs'
  differences results.json stores pair one method label only).
- synthetic: the recovery curve's methods against each other at each step count, paired.
- logn_seeds: log-n minus plain per seed (paired, bootstrap over documents) and over the 3
  seeds (intervals.paired_seeds: the wider of a 2-level bootstrap and t over the seed means).
- patches_seeds: at each grid, the highest run minus every other, paired by seed and image.
- patches: 2-D RoPE minus 1-D raster RoPE on the same images at each grid (a bootstrap over
  images at 8 x 8 and 16 x 16; the 14 images at 32 x 32 with the cluster jackknife, t(13)).
- minilm_passkey: exact match of the whole key as k / n rows with a Wilson 95% interval (a
  0/1 outcome per row; never a zero-width interval); tasks_seeds: each seed's k / n, the mean
  over seeds with the evaluator's seed-group interval, and scheme-minus-scheme pairs.
- minilm: every cell and difference with a cluster jackknife over the held-out stream's 6 KJV
  books and t quantiles with 5 degrees of freedom (a bootstrap over 6 clusters has 462
  distinct resamples and comes out about 1.5x too narrow). The evaluator now gives the same
  (`python -m posjax.evaluation.summary results/minilm`); the committed results.md there
  predates that rule and still shows a bootstrap.

Every interval is posjax.evaluation.stats.intervals' (its jackknife under 20 clusters, its Wilson).
"""

from __future__ import annotations

import json
import os

import numpy as np

from posjax.evaluation.stats.intervals import (
    difference_interval,
    jackknife_name,
    paired,
    paired_clusters_seeds,
    paired_proportions,
    paired_seeds,
    ratio_interval,
    rule_name,
    wilson,
)

HERE = os.path.dirname(os.path.abspath(__file__))


def load_cells(name: str) -> dict:
    with open(os.path.join(HERE, name, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    return {k: c for k, c in results["cells"].items() if c.get("status") == "ok"}


def rows_of(cells: dict, *parts: str) -> dict:
    """The rows of the one cell whose key holds every part."""
    found = [c["rows"] for k, c in cells.items() if all(p in k for p in parts)]
    if len(found) != 1:
        raise KeyError(f"{parts}: {len(found)} cells match, 1 expected")
    return found[0]


def fmt(est: float, lo: float, hi: float, signed: bool = True) -> str:
    f = "{:+.4f}" if signed else "{:.4f}"
    return f"{f.format(est)} [{f.format(lo)}, {f.format(hi)}]"


def same_rows(a: dict, b: dict) -> str:
    d = paired(a, b)
    return fmt(d["accuracy"], d["accuracy_lo"], d["accuracy_hi"])


def jackknife(a: dict, b: dict | None = None) -> tuple[float, float, float]:
    """accuracy(a) [- accuracy(b), the same rows] with the evaluator's leave-one-cluster-out
    jackknife (t quantiles, clusters - 1 degrees of freedom); ValueError if the rows hold so
    many clusters that the evaluator would bootstrap instead."""
    clusters = np.unique(np.asarray(a["cluster"])).size
    if rule_name(clusters) != jackknife_name(clusters):
        raise ValueError(f"{clusters} clusters get a {rule_name(clusters)!r}, not a jackknife")
    if b is None:
        return ratio_interval(a["correct"], a["count"], clusters=a["cluster"])
    return difference_interval(a["correct"], b["correct"], a["count"], den_b=b["count"],
                               clusters=a["cluster"])


def schemes_seeds() -> list[str]:
    """Each seed group and method at 8x, 32x and 128x the training length minus as_is at the
    training length (the same masked tokens, paired by seed and by document), and the highest
    at 512 and at 8192 minus every other run and method there (the same rows)."""
    with open(os.path.join(HERE, "schemes_seeds", "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    rows = {(f"{c['workdir']}@{c['step']}", c["label"], c["length"]): c["rows"]
            for c in results["cells"].values() if c.get("status") == "ok"}
    out = ["# schemes_seeds: derived intervals", "",
           "`python -m results.derived`; accuracy at L minus as_is at 64 for the same masked "
           "tokens, paired by seed and by document (intervals.paired_clusters_seeds: the wider "
           "of a 2-level bootstrap and t over the 3 seed means; rows that join documents count "
           "under their first token's, so at 2048 and 8192 the pairing is approximate).", "",
           "| run (method) | 512 - 64 | 2048 - 64 | 8192 - 64 | interval, clusters at 8192 |",
           "|---|---:|---:|---:|---|"]
    for name, group in sorted(results["groups"].items(), key=lambda kv: kv[1]["name"]):
        name, runs = group["name"], group["runs"]
        labels = sorted({label for run, label, n in rows if run == runs[0] and n > 64})
        for label in labels:
            base = [rows.get((run, "as_is", 64)) for run in runs]
            cols, last = [], ""
            for n in (512, 2048, 8192):
                at = [rows.get((run, label, n)) for run in runs]
                if any(r is None for r in base + at):
                    cols.append("")
                    continue
                d = paired_clusters_seeds(at, base, group["seeds"])
                cols.append(fmt(d["accuracy"], d["accuracy_lo"], d["accuracy_hi"]))
                docs = len({c for r in at for c in r["cluster"]})
                last = f"{d['interval']}; {docs} documents at {n}, {d['clusters']} at 64"
            if any(cols):
                out.append(f"| {name} ({label}) | {' | '.join(cols)} | {last} |")
    for n in (512, 8192):  # the best at n against every other run and method, same rows
        complete, ranked, lines = _highest_minus_each(results, rows, n, "token")
        out += lines
        if not ranked:
            continue
        mean = {k: _mean_accuracy(v) for k, v in complete.items()}
        nope = ("none", "as_is")
        if n == 8192 and nope in complete:  # NoPE: the level a scheme must beat to count
            out += ["", f"At {n}: each run and method minus NoPE ({mean[nope]:.4f}; same rows, "
                    "paired by seed and token):", ""]
            out += _minus_table(None, [k for k in ranked if k != nope], complete,
                                results["groups"], minus=nope)
    out += ["", "RoPE on queries and keys minus RoPE on values as well (same rows, paired by "
            "seed and token):", "", "| length | accuracy difference | interval |", "|---:|---:|---|"]
    for n in (64, 512, 2048, 8192):
        pair = [[rows.get((run, "as_is", n)) for run in results["groups"][g]["runs"]]
                for g in ("rope", "rope_values") if g in results["groups"]]
        groups = [results["groups"].get(g, {}).get("seeds") for g in ("rope", "rope_values")]
        if groups[0] == groups[1] and all(r is not None for r in pair[0] + pair[1]):
            d = paired_seeds(pair[0], pair[1], results["groups"]["rope"]["seeds"])
            out.append(f"| {n} | {fmt(d['accuracy'], d['accuracy_lo'], d['accuracy_hi'])} | "
                       f"{d['interval']} |")
    return out


def _mean_accuracy(seed_rows: list) -> float:
    return float(np.mean([np.sum(r["correct"]) / np.sum(r["count"]) for r in seed_rows]))


def _highest_minus_each(results: dict, rows: dict, n: int, unit: str, labels=None):
    """(complete, ranked, lines): every seed group and method with rows at length n in all of
    its seeds ({(group, label): [rows per seed]}, labels limited to labels[group] where given),
    ranked by their mean over seeds, and the highest minus each other as markdown (the same
    rows, paired by seed and `unit`; intervals.paired_seeds). ranked is empty under 2."""
    seeds_of = {(name, label): [rows.get((run, label, n)) for run in group["runs"]]
                for name, group in results["groups"].items()
                for run0, label, m in rows if run0 == group["runs"][0] and m == n
                and (labels is None or label in labels.get(name, ()))}
    complete = {k: v for k, v in seeds_of.items() if all(r is not None for r in v)}
    if len(complete) < 2:
        return complete, [], []
    mean = {k: _mean_accuracy(v) for k, v in complete.items()}
    ranked = sorted(complete, key=lambda k: -mean[k])
    best = ranked[0]
    name = results["groups"][best[0]]["name"]
    lines = ["", f"At {n}: the highest, {name} ({best[1]}), {mean[best]:.4f} over "
             f"{len(complete[best])} seeds, minus each other (same rows, paired by seed and "
             f"{unit}; intervals.paired_seeds):", ""]
    return complete, ranked, lines + _minus_table(best, ranked[1:], complete, results["groups"])


def _minus_table(base, others, complete: dict, groups: dict, minus=None) -> list[str]:
    """base minus each of others (or each of others minus `minus`), paired by seed index."""
    out = ["| run (method) | accuracy difference | interval |", "|---|---:|---|"]
    for other in others:
        a, b = (other, minus) if minus else (base, other)
        # pairs only the seeds both have: a scheme still training has fewer
        seeds_a, seeds_b = groups[a[0]]["seeds"], groups[b[0]]["seeds"]
        shared = [s for s in seeds_a if s in seeds_b]
        d = paired_seeds([complete[a][seeds_a.index(s)] for s in shared],
                         [complete[b][seeds_b.index(s)] for s in shared], shared)
        fewer = "" if len(shared) == max(len(seeds_a), len(seeds_b)) else (
            f"; seed{'s' * (len(shared) > 1)} {', '.join(map(str, shared))} only")
        out.append(f"| {groups[other[0]]['name']} ({other[1]}) | "
                   f"{fmt(d['accuracy'], d['accuracy_lo'], d['accuracy_hi'])} | "
                   f"{d['interval']}{fewer} |")
    return out


def synthetic() -> list[str]:
    cells = load_cells("synthetic")
    learned = "synthetic_long/learned"
    step = lambda m, s: rows_of(cells, f"{learned}_{m}_L192@{s}|")  # noqa: E731
    zero = lambda m, n: rows_of(cells, f"{learned}@20000|{m}|L={n}|")  # noqa: E731
    out = ["# synthetic: derived intervals", "",
           "`python -m results.derived`; paired on the same rows, 95% bootstrap over the 27 "
           "held-out documents, 1 seed.", "",
           "| comparison | accuracy difference |", "|---|---:|"]
    h02, h04 = 'hierarchical{"alpha": 0.2}', 'hierarchical{"alpha": 0.4}'
    for n in (192, 512):
        out.append(f"| zero-shot {n}: new_rows - hierarchical alpha 0.2 | "
                   f"{same_rows(zero('new_rows{}', n), zero(h02, n))} |")
        out.append(f"| zero-shot {n}: hierarchical alpha 0.4 - tile | "
                   f"{same_rows(zero(h04, n), zero('tile{}', n))} |")
    hier = "hierarchical_alpha_0.4"
    for s in (100, 300, 1000):
        for a, b in ((hier, "interpolate"), (hier, "tile"), ("interpolate", "tile")):
            out.append(f"| {s} steps at 192: {a} - {b} | {same_rows(step(a, s), step(b, s))} |")
    return out


def minilm() -> list[str]:
    cells = load_cells("minilm")
    base = "workdirs/minilm512@300|"
    zero = lambda m, n=1536: rows_of(cells, f"{base}{m}|L={n}|")  # noqa: E731
    cont = lambda m, s: rows_of(cells, f"continued/minilm512_{m}_L1536@{s}|")  # noqa: E731
    hier = 'hierarchical{"alpha": 0.4}'
    out = ["# minilm: cluster-jackknife intervals", "",
           "`python -m results.derived`; leave-one-book-out jackknife over the 6 KJV books of "
           "the held-out stream, t quantile with 5 degrees of freedom; 1 seed, 1 MLM head.", "",
           "| cell | accuracy | minus hierarchical (same rows) |", "|---|---:|---:|"]
    out.append(f"| 512 intact | {fmt(*jackknife(zero('as_is{}', 512)), signed=False)} | |")
    shuffled = zero('as_is{"shuffle_positions": true}', 512)
    out.append("| 512 intact - positions shuffled | "
               f"{fmt(*jackknife(zero('as_is{}', 512), shuffled))} | |")
    for m in ("truncate{}", hier, "tile{}", "new_rows{}", "stretch{}", "interpolate{}"):
        diff = "" if m == hier else fmt(*jackknife(zero(m), zero(hier)))
        out.append(f"| 1536 zero-shot {m.split('{')[0]} | "
                   f"{fmt(*jackknife(zero(m)), signed=False)} | {diff} |")
    for s in (30, 60):
        h, i = cont("hierarchical_alpha_0.4", s), cont("interpolate", s)
        out.append(f"| {s} steps at 1536: hierarchical | {fmt(*jackknife(h), signed=False)} | |")
        out.append(f"| {s} steps at 1536: interpolate | {fmt(*jackknife(i), signed=False)} | "
                   f"{fmt(*jackknife(i, h))} |")
        out.append(f"| {s} steps at 1536: truncate (no training) - hierarchical | | "
                   f"{fmt(*jackknife(zero('truncate{}'), h))} |")
    return out


def logn_seeds() -> list[str]:
    cells = load_cells("logn_seeds")
    cell = lambda seed, method, n: rows_of(  # noqa: E731
        cells, f"/roformer64_seed{seed}@", f"|{method}|", f"|L={n}|")
    rows, names = [], set()
    for n in (128, 256, 512, 1024):
        per_seed = [paired(cell(s, 'as_is{"logn": true}', n), cell(s, "as_is{}", n))
                    for s in range(3)]
        over = paired_seeds([cell(s, 'as_is{"logn": true}', n) for s in range(3)],
                            [cell(s, "as_is{}", n) for s in range(3)], [0, 1, 2])
        names.add(over["accuracy_interval"])
        rows.append(f"| {n} | " + " | ".join(
            fmt(d["accuracy"], d["accuracy_lo"], d["accuracy_hi"]) for d in per_seed + [over])
            + " |")
    return ["# logn_seeds: log-n minus plain RoPE, per seed and over seeds", "",
            "`python -m results.derived`; per seed: paired on the same rows, 95% bootstrap over "
            "documents; over seeds: the mean of the 3 differences with the evaluator's "
            f"seed-group interval ({'; '.join(sorted(names))}).", "",
            "| length | seed 0 | seed 1 | seed 2 | over 3 seeds |", "|---:|---:|---:|---:|---:|"
            ] + rows


def rope_logn_seeds(root: str = HERE) -> list[str]:
    """RoPE, YaRN and ReRoPE with and without log-n: each cell's mean over the 3 seeds, and
    log-n minus none paired by seed and token (intervals.paired_seeds)."""
    with open(os.path.join(root, "rope_logn_seeds", "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    cells = {k: c for k, c in results["cells"].items() if c.get("status") == "ok"}
    group = results["groups"]["rope"]
    lengths = (64, 512, 2048, 8192)

    def rows(run: str, label: str, n: int) -> dict:
        return rows_of({k: c for k, c in cells.items() if k.startswith(run + "|")},
                       f"|{label}|", f"|L={n}|")

    means = {(c["label"], c["length"]): c["overall"] for c in results["seed_cells"].values()
             if c.get("status") == "ok"}
    out = ["# rope_logn_seeds: log-n on RoPE, YaRN and ReRoPE over 3 seeds", "",
           "`python -m results.derived`; accuracy, the mean over seeds with the evaluator's "
           "interval (method per cell in results.md), and log-n minus none paired by seed "
           "and token (the wider of a 2-level bootstrap and t over seed means).", "",
           "| method | " + " | ".join(str(n) for n in lengths) + " |",
           "|---|" + "---:|" * len(lengths)]
    for label in ("rerope+logn", "rerope", "yarn+logn", "yarn", "as_is+logn", "as_is"):
        cols = [fmt(o["accuracy"], o["accuracy_lo"], o["accuracy_hi"], signed=False)
                if (o := means.get((label, n))) else "-" for n in lengths]
        out.append(f"| {label} | " + " | ".join(cols) + " |")
    out += ["", "| log-n minus none | " + " | ".join(str(n) for n in lengths[1:]) + " |",
            "|---|" + "---:|" * (len(lengths) - 1)]
    for method in ("rerope", "yarn", "as_is"):
        cols = []
        for n in lengths[1:]:
            d = paired_seeds([rows(r, f'{method}{{"logn": true}}', n) for r in group["runs"]],
                             [rows(r, f"{method}{{}}", n) for r in group["runs"]],
                             group["seeds"])
            cols.append(fmt(d["accuracy"], d["accuracy_lo"], d["accuracy_hi"]))
        out.append(f"| {method} | " + " | ".join(cols) + " |")
    label = 'rerope{"logn": true}'
    d = paired_clusters_seeds([rows(r, label, lengths[-1]) for r in group["runs"]],
                              [rows(r, label, lengths[0]) for r in group["runs"]], group["seeds"])
    return out + ["", f"ReRoPE + log-n at {lengths[-1]} minus at {lengths[0]} (the same tokens, "
                  "paired by seed and cluster): "
                  f"{fmt(d['accuracy'], d['accuracy_lo'], d['accuracy_hi'])}."]


def patches() -> list[str]:
    cells = load_cells("patches")
    cell = lambda run, n: rows_of(cells, f"/{run}@", "|as_is{}|", f"|L={n}|")  # noqa: E731
    out = ["# patches: 2-D RoPE minus raster RoPE, same images", "",
           "`python -m results.derived`; 1 seed.", "",
           "| grid | rope2d_axial - rope_raster | interval |", "|---|---:|---|"]
    for n, grid in ((64, "8 x 8"), (256, "16 x 16")):
        out.append(f"| {grid} | {same_rows(cell('rope2d_axial', n), cell('rope_raster', n))} "
                   "| bootstrap over images |")
    jk = jackknife(cell("rope2d_axial", 1024), cell("rope_raster", 1024))
    out.append(f"| 32 x 32 | {fmt(*jk)} | jackknife over 14 images, t(13) |")
    return out


def patches_seeds() -> list[str]:
    """At each grid, the highest run minus each other, paired by seed and image: every run as
    it is, the learned table by truncation (its 64 rows end at 8 x 8)."""
    with open(os.path.join(HERE, "patches_seeds", "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    rows = {(f"{c['workdir']}@{c['step']}", c["label"], c["length"]): c["rows"]
            for c in results["cells"].values() if c["status"] == "ok"}
    labels = {name: ("truncate",) if name.startswith("learned") else ("as_is",)
              for name in results["groups"]}
    out = ["# patches_seeds: the highest at each grid minus each other run", "",
           "`python -m results.derived`; masked-patch accuracy, the same held-out images for "
           "every run at a grid (8 x 8 = 64 patches, 16 x 16 = 256, 32 x 32 = 1024)."]
    for n in (64, 256, 1024):
        out += _highest_minus_each(results, rows, n, "image", labels)[2]
    return out


def exact_matches(name: str) -> list[str]:
    """Passkey exact match (every digit right) per run, method and length."""
    with open(os.path.join(HERE, name, "results.json"), encoding="utf-8") as f:
        tasks = json.load(f)["tasks"]
    out = [f"# {name}: passkey exact match with Wilson intervals", "",
           "`python -m results.derived`; rows whose every answer token is right, k / n, with a "
           "Wilson 95% interval; 1 seed.", "",
           "| run | method | length | exact match |", "|---|---|---:|---:|"]
    ok = [c for c in tasks.values() if c.get("status") == "ok" and c["task"] == "passkey"]
    for c in sorted(ok, key=lambda c: (c["run"], c["label"], c["length"])):
        rows = c["rows"]
        k = sum(int(a == b) for a, b in zip(rows["correct"], rows["count"]))
        n = len(rows["count"])
        out.append(f"| {c['run']} | {c['label']} | {c['length']} | {k}/{n} "
                   f"{fmt(*wilson(k, n), signed=False)} |")
    return out


def _exact_rows(rows: dict) -> dict:
    """A passkey cell's rows as 0/1 ratio rows (every answer token right), each row its own
    cluster (the rows are generated examples, the same for every run)."""
    correct, count = np.asarray(rows["correct"], float), np.asarray(rows["count"], float)
    hit = ((correct == count) & (count > 0)).astype(float)
    return {"correct": hit, "count": (count > 0).astype(float), "loss": np.zeros_like(hit),
            "cluster": np.arange(hit.size)}


def _passkey(name: str, root: str) -> tuple[dict, dict]:
    """(results.json, {(run, label, length): exact-match rows}) of a task folder's passkey
    cells, run as the seed groups name it (workdir@step)."""
    with open(os.path.join(root, name, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    return results, {(f"{c['workdir']}@{c['step']}", c["label"], c["length"]):
                     _exact_rows(c["rows"]) for c in results["tasks"].values()
                     if c.get("status") == "ok" and c["task"] == "passkey"}


def exact_matches_seeds(name: str, root: str = HERE) -> list[str]:
    """Passkey exact match per seed group, method and length: each seed's k / n and the mean
    over seeds with the evaluator's seed-group interval (posjax.evaluation.derive.seeds)."""
    results, cells = _passkey(name, root)
    out = [f"# {name}: passkey exact match per seed group", "",
           "`python -m results.derived`; each seed's rows whose every answer token is right, "
           "k / n; the mean over seeds with the evaluator's interval (its method in the last "
           "column; never zero-width).", "",
           "| run | method | length | per seed | mean over seeds | interval |",
           "|---|---|---:|---|---:|---|"]
    seed_cells = sorted((c for c in results.get("task_seed_cells", {}).values()
                         if c.get("status") == "ok" and c["task"] == "passkey"),
                        key=lambda c: (c["group"], c["label"], c["length"]))
    for c in seed_cells:
        per_seed = []
        for run in results["groups"][c["group"]]["runs"]:
            r = cells.get((run, c["label"], c["length"]))
            per_seed.append("-" if r is None else f"{r['correct'].sum():.0f}/{r['count'].size}")
        o = c["overall"]
        out.append(f"| {c['group']} | {c['label']} | {c['length']} | {' '.join(per_seed)} | "
                   f"{fmt(o['exact'], o['exact_lo'], o['exact_hi'], signed=False)} | "
                   f"{o['interval']} |")
    return out


def exact_pairs(name: str, lengths=(64, 512, 2048, 8192), root: str = HERE) -> list[str]:
    """Passkey exact match of one scheme minus another (as_is, or truncate for a table), paired
    by seed index and by row, for every pair of the groups that retrieve anything at the
    training length (the others score 0 everywhere)."""
    results, by_label = _passkey(name, root)
    cells = {(run, n): rows for (run, label, n), rows in by_label.items()
             if label in ("as_is", "truncate")}
    groups = {g: info for g, info in results["groups"].items()
              if all((run, n) in cells for run in info["runs"] for n in lengths)}
    learned = sorted(g for g, info in groups.items()
                     if sum(cells[(run, lengths[0])]["correct"].sum() for run in info["runs"]))
    out = ["", f"Exact match, one scheme minus another, paired by seed and row (the schemes "
           f"that retrieve anything at {lengths[0]}; intervals.paired_seeds):", "",
           "| a - b | " + " | ".join(str(n) for n in lengths) + " |",
           "|---|" + "---:|" * len(lengths)]
    for i, a in enumerate(learned):
        for b in learned[i + 1:]:
            if groups[a]["seeds"] != groups[b]["seeds"]:
                continue
            cols = []
            for n in lengths:
                rows_a = [cells[(r, n)] for r in groups[a]["runs"]]
                rows_b = [cells[(r, n)] for r in groups[b]["runs"]]
                d = paired_seeds(rows_a, rows_b, groups[a]["seeds"])
                lo, hi, note = max(d["accuracy_lo"], -1.0), min(d["accuracy_hi"], 1.0), ""
                if hi - lo <= 0:  # every pair alike in every seed: Newcombe over the pooled pairs
                    _, lo, hi = paired_proportions(
                        np.concatenate([r["correct"] for r in rows_a]) > 0,
                        np.concatenate([r["correct"] for r in rows_b]) > 0)
                    note = " (N)"
                cols.append(fmt(d["accuracy"], lo, hi) + note)
            out.append(f"| {a} - {b} | " + " | ".join(cols) + " |")
    return out + ["", "The wider of a 2-level bootstrap and t over seed means, cut to [-1, 1]; "
                  "(N): every pair alike in every seed, so Newcombe's paired score interval "
                  "over the pooled (seed, row) pairs instead (never zero-width)."]


def main() -> None:
    for name, lines in (("schemes_seeds", schemes_seeds()),
                        ("synthetic", synthetic()), ("minilm", minilm()),
                        ("logn_seeds", logn_seeds()), ("patches", patches()),
                        ("patches_seeds", patches_seeds()),
                        ("rope_logn_seeds", rope_logn_seeds()),
                        ("tasks_seeds", exact_matches_seeds("tasks_seeds")
                         + exact_pairs("tasks_seeds")),
                        ("minilm_passkey", exact_matches("minilm_passkey"))):
        with open(os.path.join(HERE, name, "derived.md"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        print(f"wrote {os.path.join('results', name, 'derived.md')}")


if __name__ == "__main__":
    main()
