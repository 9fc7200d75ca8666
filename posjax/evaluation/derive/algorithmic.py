"""The derived sections of an algorithmic results.json (pure numpy and the evaluator's
intervals; no JAX), recomputed from the per-sequence sums of the cells:

  algorithmic_groups       the runs grouped by training seed (posjax.evaluation.derive.seeds.groups:
                           runs whose config without `seed`, and step, are equal)
  algorithmic_seed_cells   {<group>|L=<n>|<settings>: the mean over the group's seeds at one
                           test length, with its 95% interval over seeds then sequences
                           (intervals.summarize_seeds: a 2-level bootstrap, or with >= 3
                           seeds the wider of it and a t interval over the seed means)}
  algorithmic_scores       {<group>|<settings>|<range>: the mean over the lengths of `range`
                           ('test': longer than trained, the papers' score; 'train': 1..the
                           training maximum) of the per-length accuracy, averaged over seeds,
                           with its interval}
  algorithmic_differences  randomized minus plain for each task and encoding, paired by
                           training seed and by test sequence: per length
                           ('<a seed cell> - <b seed cell>') and over each range
                           ('<a group> - <b group>|<settings>|<range>'); a plain and a
                           randomized group pair when their configs differ only in
                           the RANDOMIZATION_FIELDS (and seed)
  algorithmic_averages     {<scheme>|<settings>|<range>: that difference averaged over the
                           tasks that have both runs}

Means over lengths weigh every length alike (the reference's score: np.mean of the
per-length accuracies); each is one `intervals.estimate` of a weighted sum of ratios, so its
interval resamples seeds and sequences as a per-length cell's does. Sequences are drawn
independently per length and per task but indexed alike (0 .. sequences-1), and a resample
takes the same indices everywhere; seeds pair by their value.
"""

from __future__ import annotations

import copy
import hashlib
import json

import numpy as np

from posjax.evaluation.stats import intervals
from posjax.evaluation.derive import seeds as seeds_lib
from posjax.evaluation.results.results_file import interval_seed, section

SECTION = "algorithmic"
GROUPS, SEED_CELLS, SCORES = "algorithmic_groups", "algorithmic_seed_cells", "algorithmic_scores"
DIFFERENCES, AVERAGES = "algorithmic_differences", "algorithmic_averages"
RANGES = ("test", "train")
_KEEP = ("scheme", "task", "randomized", "test_positions", "dropout", "length",
         "trained_max_input", "sequences", "step")


def in_range(cell: dict, which: str) -> bool:
    longer = cell["length"] > cell["trained_max_input"]
    return longer if which == "test" else not longer


# The data fields by which a randomized run differs from its plain twin.
RANDOMIZATION_FIELDS = ("randomized_max_length", "randomized_eval", "randomized_layers")


def pair_fingerprint(config: dict, step) -> str:
    """What a plain run and its randomized twin share: the config without seed and the
    randomization fields, and the step."""
    body = copy.deepcopy({k: v for k, v in config.items() if k != "seed"})
    for k in RANDOMIZATION_FIELDS:
        body["data"].pop(k, None)  # a plain run's config may not hold them
    text = json.dumps([body, step], sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def _sums(rows: dict, key: str, g: int) -> np.ndarray:
    return np.bincount(np.asarray(rows["cluster"], np.int64),
                       weights=np.asarray(rows[key], np.float64), minlength=g)


def _mean_of(parts: list[tuple[float, list[dict]]], seeds: list, seed: int) -> dict:
    """sum_k weight_k * (mean over seeds of the ratio of parts k's rows), for accuracy and
    loss: parts [(weight, [rows of seed s, in `seeds` order])], all over clusters 0..G-1."""
    g = max(max(max(r["cluster"]) for r in rows) for _, rows in parts) + 1
    out = {"n_seeds": len(seeds), "seeds": [int(s) for s in seeds], "clusters": int(g),
           "per_seed": {}}
    for name, key in intervals.METRICS:
        terms = [(w, np.stack([_sums(r, key, g) for r in rows]),
                  np.stack([_sums(r, "count", g) for r in rows])) for w, rows in parts]
        e = intervals.estimate(terms, seed=seed)
        out.update({name: e["value"], f"{name}_lo": e["lo"], f"{name}_hi": e["hi"],
                    f"{name}_interval": e["interval"]})
        with np.errstate(invalid="ignore", divide="ignore"):
            out["per_seed"][name] = [float(sum(w * n[i].sum() / d[i].sum() for w, n, d in terms))
                                     for i in range(len(seeds))]
    out["interval"] = out["accuracy_interval"]
    return out


def _bound_proportion(d: dict) -> None:
    """An accuracy's interval inside [0, 1], and never one point: where every sequence of
    every seed and length scored alike (all right), Wilson's over the sequences."""
    lo, hi = d["accuracy_lo"], d["accuracy_hi"]
    if np.isfinite(d["accuracy"]) and np.isfinite(lo) and hi - lo <= 0:
        _, d["accuracy_lo"], d["accuracy_hi"] = intervals.wilson(
            d["accuracy"] * d["clusters"], d["clusters"])
        d["interval"] = d["accuracy_interval"] = \
            f"{d['accuracy_interval']}, Wilson over {d['clusters']} sequences (all equal)"
    elif np.isfinite(lo) and np.isfinite(hi) and (lo < 0 or hi > 1):
        d["accuracy_lo"], d["accuracy_hi"] = max(lo, 0.0), min(hi, 1.0)
        d["interval"] = d["accuracy_interval"] = f"{d['accuracy_interval']}, clipped to [0, 1]"


def _by_group(results: dict, group_map: dict) -> dict:
    """{(group, '<L=n>|<settings>'): {seed: cell}} over the algorithmic cells."""
    seed_of = {r: s for g in group_map.values() for r, s in zip(g["runs"], g["seeds"])}
    group_of = {r: k for k, g in group_map.items() for r in g["runs"]}
    out: dict = {}
    for key, c in section(results, SECTION).items():
        run, _, rest = key.partition("|")
        if run in group_of:
            out.setdefault((group_of[run], rest), {})[seed_of[run]] = c
    return out


def seed_cells(results: dict, group_map: dict, seed: int) -> dict:
    out = {}
    for (group, rest), by_seed in _by_group(results, group_map).items():
        g = group_map[group]
        ok = {s: c for s, c in by_seed.items() if seeds_lib.has_rows(c)}
        first = (ok or by_seed)[min(ok or by_seed)]
        record = {k: first[k] for k in _KEEP}
        record.update(run=g["name"], group=group, settings=rest.partition("|")[2],
                      runs=[r for r, s in zip(g["runs"], g["seeds"]) if s in by_seed])
        if ok:
            seeds = sorted(ok)
            record["overall"] = intervals.summarize_seeds([ok[s]["rows"] for s in seeds], seeds,
                                                          seed=seed)
            record.update(status="ok", n_seeds=len(seeds), seeds=seeds,
                          interval=record["overall"]["interval"])
        else:
            record.update(status=first["status"], reason=first["reason"],
                          n_seeds=len(by_seed), seeds=sorted(by_seed), interval=None)
        out[f"{group}|{rest}"] = record
    return out


def _range_cells(sc: dict, group: str, settings: str, which: str) -> dict:
    """{length: seed cell} of one group's ok seed cells in a range."""
    return {c["length"]: c for c in sc.values() if c["group"] == group and
            c["settings"] == settings and c["status"] == "ok" and in_range(c, which)}


def _index(results: dict) -> dict:
    """{(run key, 'L=n|settings'): rows} of the ok cells (one pass over the section)."""
    out = {}
    for key, c in section(results, SECTION).items():
        if seeds_lib.has_rows(c):
            run, _, rest = key.partition("|")
            out[(run, rest)] = c["rows"]
    return out


def _seed_rows(index: dict, group: dict, cell: dict) -> dict:
    rest = f"L={cell['length']}|{cell['settings']}"
    return {s: index[(r, rest)] for r, s in zip(group["runs"], group["seeds"])
            if (r, rest) in index}


def _common(seed_sets) -> list:
    sets = [set(s) for s in seed_sets]
    return sorted(set.intersection(*sets)) if sets else []


def _side(index, group_map, cells: dict, weight: float) -> tuple[list, list]:
    """[(weight, {seed: rows})] per length of `cells` ({length: seed cell})."""
    return [(weight, _seed_rows(index, group_map[c["group"]], c)) for c in cells.values()], \
        list(cells)


def scores(sc: dict, index: dict, group_map: dict, seed: int) -> dict:
    out = {}
    for group, settings in sorted({(c["group"], c["settings"]) for c in sc.values()}):
        for which in RANGES:
            cells = _range_cells(sc, group, settings, which)
            if not cells:
                continue
            parts, lengths = _side(index, group_map, cells, 1.0 / len(cells))
            seeds = _common(p.keys() for _, p in parts)
            if not seeds:
                continue
            first = next(iter(cells.values()))
            record = _mean_of([(w, [p[s] for s in seeds]) for w, p in parts], seeds, seed)
            _bound_proportion(record)
            record.update({k: first[k] for k in ("run", "group", "scheme", "task",
                                                 "randomized", "test_positions", "dropout",
                                                 "trained_max_input", "sequences")},
                          settings=settings, range=which, lengths=sorted(lengths))
            out[f"{group}|{settings}|{which}"] = record
    return out


def pairs(sc: dict, results: dict, group_map: dict) -> list[tuple[str, str]]:
    """(randomized group, plain group) pairs: configs equal but for randomization."""
    info = {}
    for c in sc.values():
        if c["group"] not in info:
            r = results["runs"][group_map[c["group"]]["runs"][0]]
            info[c["group"]] = (pair_fingerprint(r["config"], r["step"]),
                                bool(c["randomized"]))
    plain = {fp: g for g, (fp, rnd) in info.items() if not rnd}
    return sorted((g, plain[fp]) for g, (fp, rnd) in info.items() if rnd and fp in plain)


def differences(sc, index, group_map, pair_list, seed: int) -> tuple[dict, dict]:
    """(per length and per range differences, averages over tasks), randomized - plain."""
    out, by_scheme = {}, {}
    for a, b in pair_list:
        for settings in sorted({c["settings"] for c in sc.values() if c["group"] == a}):
            for which in RANGES:
                ca, cb = (_range_cells(sc, g, settings, which) for g in (a, b))
                lengths = sorted(set(ca) & set(cb))
                if not lengths:
                    continue
                first = ca[lengths[0]]
                tag = {"a_run": first["run"], "b_run": cb[lengths[0]]["run"], "a_group": a,
                       "b_group": b, "task": first["task"], "scheme": first["scheme"],
                       "settings": settings}
                for n in lengths:
                    ra = _seed_rows(index, group_map[a], ca[n])
                    rb = _seed_rows(index, group_map[b], cb[n])
                    seeds = _common([ra, rb])
                    if not seeds:
                        continue
                    try:
                        d = intervals.paired_seeds([ra[s] for s in seeds],
                                                   [rb[s] for s in seeds], seeds, seed=seed)
                    except ValueError:  # not the same sequences: no pairing
                        continue
                    out[f"{a}|L={n}|{settings} - {b}|L={n}|{settings}"] = dict(
                        d, **tag, length=n, kind="length", range=which)
                parts = []
                for n in lengths:
                    parts.append((1.0 / len(lengths), _seed_rows(index, group_map[a], ca[n])))
                    parts.append((-1.0 / len(lengths), _seed_rows(index, group_map[b], cb[n])))
                seeds = _common(p.keys() for _, p in parts)
                if not seeds:
                    continue
                d = _mean_of([(w, [p[s] for s in seeds]) for w, p in parts], seeds, seed)
                out[f"{a} - {b}|{settings}|{which}"] = dict(d, **tag, kind="range", range=which,
                                                            lengths=lengths)
                by_scheme.setdefault((first["scheme"], settings, which), []).append(
                    (first["task"], parts))
    averages = {}
    for (scheme, settings, which), items in sorted(by_scheme.items()):
        seeds = _common(p.keys() for _, parts in items for _, p in parts)
        if not seeds:
            continue
        k = len(items)
        d = _mean_of([(w / k, [p[s] for s in seeds]) for _, parts in items for w, p in parts],
                     seeds, seed)
        averages[f"{scheme}|{settings}|{which}"] = dict(
            d, scheme=scheme, settings=settings, range=which,
            tasks=sorted(task for task, _ in items))
    return out, averages


def derive(results: dict) -> dict:
    """Fill the sections of the module docstring in place; returns `results`."""
    seed = interval_seed(results)
    algorithmic_runs = {k.partition("|")[0] for k in section(results, SECTION)}
    group_map = seeds_lib.groups(results, skip=set(results["runs"]) - algorithmic_runs)
    sc = seed_cells(results, group_map, seed)
    index = _index(results)
    results[GROUPS], results[SEED_CELLS] = group_map, sc
    results[SCORES] = scores(sc, index, group_map, seed)
    results[DIFFERENCES], results[AVERAGES] = differences(
        sc, index, group_map, pairs(sc, results, group_map), seed)
    return results
