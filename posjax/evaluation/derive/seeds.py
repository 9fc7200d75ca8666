"""Training seeds as an axis of the evaluator: runs that differ only in their training seed are
one GROUP, and every table cell is the mean over the group's seeds with an interval that
accounts for them (posjax.evaluation.stats.intervals.summarize_seeds).

Grouping (`groups`): runs whose config, with the top-level `seed` removed, and checkpoint
step are equal (their `fingerprint`) form a group, unless eval.py --group named the group's
runs explicitly (results.json settings.groups: {name: [run keys]}). The seeds of a group must
differ (two runs with one seed are two groups). A run alone is a 1-seed group whose key is its
run key, so a seed cell of an ungrouped run has the key of the run's own cell. Runs of a
recovery curve (continued training) are not grouped: they have tables of their own.

results.json sections written here (through posjax.evaluation.derive):
  groups      {<group key>: {name, runs: [run keys, by seed], seeds, fingerprint}}
  seed_cells  {<group key>|<variant>|L=<length>|<settings hash>: the first seed's cell
               record without its rows, with run = the group's name, group, runs,
               n_seeds, seeds, interval, and overall = summarize_seeds of the seeds' rows
               (mean over seeds, lo/hi, n_seeds, seeds, interval, per_seed)}
  reliance    {<group key>: intact minus shuffled positions at the training length}, and
               for each seed of a group of several, {<run key>: the same for that run}
  differences {"<seed cell a> - <seed cell b>": a minus b, paired by seed index and token:
               kind 'baseline' (b is the --baseline method's cell of the same group and
               length), 'methods' (two other variants of one group at one length) or 'runs'
               (one variant label at one length in two groups; groups only); each seed of a
               group of several also gets its own 'baseline' and 'methods' pairs, keyed by
               its run's cell keys (n_seeds 1); with a, b, a_label,
               b_label, a_run, b_run, length, baseline (kind 'baseline'), n_seeds, seeds,
               interval, per_seed}
  task_seed_cells  (with task cells) the task cells of groups of several seeds, keyed as
               the group's seed cells plus |<task>: exact match and per-token accuracy, in
               all and per depth, as the mean over seeds (`task_summary`); tasks.md shows
               them in place of their runs' cells
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Optional

import numpy as np

from posjax import schema
from posjax.evaluation.stats import intervals
from posjax.evaluation.results.results_file import has_rows, section  # noqa: F401 (seeds.has_rows)

_SEED_SUFFIX = re.compile(r"[_-]?seed[_-]?\d+$")


def fingerprint(config: Optional[dict], step) -> str:
    """What two seeds of one experiment share: the config without its seed, and the step."""
    body = {k: v for k, v in (config or {}).items() if k != "seed"}
    text = json.dumps([body, step], sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def config_seed(config: Optional[dict]) -> int:
    """A run's training seed: its config's `seed`, 0 where absent."""
    return int(schema.value(config or {}, "seed") or 0)


def run_seed(entry: dict) -> int:
    return config_seed(entry["config"])


def _name(entries: list[dict], key: str) -> str:
    names = {_SEED_SUFFIX.sub("", e["name"]) for e in entries}
    return names.pop() if len(names) == 1 and "" not in names else key


def groups(results: dict, skip: set = frozenset()) -> dict:
    """{group key: {name, runs, seeds, fingerprint}} over results['runs'] (minus `skip`)."""
    runs = {k: e for k, e in results["runs"].items() if k not in skip}
    explicit = results["settings"].get("groups") or {}
    members: dict = {}
    taken = set()
    for name, keys in sorted(explicit.items()):
        keys = [k for k in keys if k in runs]
        if keys:
            members[("explicit", name)] = keys
            taken.update(keys)
    for key, e in sorted(runs.items()):
        if key not in taken:
            fp = fingerprint(e["config"], e["step"])
            members.setdefault(("auto", fp), []).append(key)
    out = {}
    for (kind, ident), keys in members.items():
        keys = sorted(keys, key=lambda k: (run_seed(runs[k]), k))
        seeds = [run_seed(runs[k]) for k in keys]
        if kind == "auto" and len(set(seeds)) < len(seeds):  # not seed replicas
            parts = [[k] for k in keys]
        else:
            parts = [keys]
        for part in parts:
            key = ident if kind == "explicit" else (part[0] if len(part) == 1 else
                                                     _name([runs[k] for k in part], part[0]))
            while key in out:
                key += "'"
            out[key] = {"name": ident if kind == "explicit" else (
                            runs[part[0]]["name"] if len(part) == 1 else key),
                        "runs": part, "seeds": [run_seed(runs[k]) for k in part],
                        "fingerprint": fingerprint(runs[part[0]]["config"],
                                                   runs[part[0]]["step"])}
    return out


_MEMO: dict = {}


def _memo(kind: str, cells: list, labels: list, seed: int, compute):
    key = (kind, seed, tuple(labels), tuple(
        (hash(tuple(c["rows"]["correct"])), hash(tuple(c["rows"]["loss"])),
         hash(tuple(c["rows"]["count"])), hash(tuple(c["rows"]["cluster"]))) for c in cells))
    if key not in _MEMO:
        if len(_MEMO) > 20000:
            _MEMO.clear()
        _MEMO[key] = compute()
    return _MEMO[key]


def summarize_cells(cells: list[dict], seeds: list, seed: int = 0) -> dict:
    """summarize_seeds of ok cells (memoised: tables are rewritten after every cell)."""
    return dict(_memo("cell", cells, seeds, seed, lambda: intervals.summarize_seeds(
        [c["rows"] for c in cells], seeds, seed=seed)))


def paired_cells(a: list[dict], b: list[dict], seeds: list, seed: int = 0) -> Optional[dict]:
    """paired_seeds of two lists of ok cells (seed i with seed i); None if rows differ."""
    def compute():
        try:
            return intervals.paired_seeds([c["rows"] for c in a], [c["rows"] for c in b],
                                          seeds, seed=seed)
        except ValueError:
            return None
    out = _memo("pair", a + b, seeds, seed, compute)
    return None if out is None else dict(out)


def _by_group(cells: dict, group_map: dict, min_runs: int = 1) -> dict:
    """{<group key>|<rest of the cell key>: {run key: cell}} over `cells` ({key: cell}) of the
    runs of groups with at least `min_runs` runs."""
    where = {k: g for g, info in group_map.items() for k in info["runs"]
             if len(info["runs"]) >= min_runs}
    out: dict = {}
    for key, c in cells.items():
        run, _, rest = key.partition("|")
        if run in where:
            out.setdefault(f"{where[run]}|{rest}", {})[run] = c
    return out


def seed_cells(results: dict, group_map: dict, seed: int = 0) -> dict:
    """{seed cell key: record} for every (group, variant, length, settings) of the cells."""
    collect = _by_group(results["cells"], group_map)
    out = {}
    for key, by_run in collect.items():
        g = group_map[key.partition("|")[0]]
        order = [(s, r) for s, r in zip(g["seeds"], g["runs"]) if r in by_run]
        ok = [(s, by_run[r]) for s, r in order if has_rows(by_run[r])]
        first = (ok[0][1] if ok else by_run[order[0][1]])
        record = {k: v for k, v in first.items() if k not in ("rows", "buckets", "overall")}
        record.update(run=g["name"], group=key.partition("|")[0],
                      runs=[r for _, r in order])
        if ok:
            seeds = [s for s, _ in ok]
            record["overall"] = summarize_cells([c for _, c in ok], seeds, seed)
            record.update(status="ok", n_seeds=len(ok), seeds=seeds,
                          interval=record["overall"]["interval"])
            if len(ok) == 1:
                record["buckets"] = first["buckets"]
        else:  # not applicable (or failed) for every seed: say so for all of them
            record.update(n_seeds=len(order), seeds=[s for s, _ in order], interval=None)
        out[key] = record
    return out


def _task_rows(rows: dict, pick, exact: bool) -> dict:
    """A retrieval task cell's rows as ratio rows, every row its own cluster: exact match
    (1 of 1 per asked row) or per-token accuracy (correct of count)."""
    correct = np.asarray(rows["correct"], np.float64)[pick]
    count = np.asarray(rows["count"], np.float64)[pick]
    if exact:
        correct, count = ((correct == count) & (count > 0)).astype(np.float64), \
            (count > 0).astype(np.float64)
    return {"correct": correct, "count": count, "loss": np.zeros_like(count),
            "cluster": np.arange(count.size)}


def task_summary(cells: list[dict], seeds: list, seed: int = 0, depth=None) -> dict:
    """Exact match and per-token accuracy over the seeds' cells (rows at `depth` only when
    given): one seed keeps scoring.summary's Wilson interval; several seeds average them
    (intervals.summarize_seeds over rows as clusters)."""
    out = {}
    for name, exact in (("exact", True), ("digit_accuracy", False)):
        parts = []
        for c in cells:
            d = np.asarray(c["rows"].get("depth", [0.0] * len(c["rows"]["count"])))
            pick = np.flatnonzero(d == depth) if depth is not None else np.arange(d.size)
            parts.append(_task_rows(c["rows"], pick, exact))
        summary = intervals.summarize_seeds(parts, seeds, seed=seed)
        out.update({name: summary["accuracy"], f"{name}_lo": summary["accuracy_lo"],
                    f"{name}_hi": summary["accuracy_hi"],
                    f"{name}_interval": summary["accuracy_interval"]})
        out.update(rows=summary["rows"], count=int(sum(np.sum(p["count"]) for p in parts)))
    out["interval"] = out.pop("exact_interval")
    return dict(out, n_seeds=len(cells), seeds=list(seeds))


def task_seed_cells(results: dict, group_map: dict, seed: int = 0) -> dict:
    """{<group key>|<variant>|L=<n>|<task>|<hash>: task record} for seed groups of more than
    one seed (a 1-seed group's task cells are the run's own)."""
    collect = _by_group(section(results, "tasks"), group_map, min_runs=2)
    out = {}
    for key, by_run in collect.items():
        g = group_map[key.partition("|")[0]]
        ok = [(s, by_run[r]) for s, r in zip(g["seeds"], g["runs"])
              if r in by_run and has_rows(by_run[r])]
        first = ok[0][1] if ok else next(iter(by_run.values()))
        record = {k: v for k, v in first.items() if k not in ("rows", "overall", "depths",
                                                               "buckets")}
        record.update(run=g["name"], group=key.partition("|")[0], n_seeds=len(ok),
                      seeds=[s for s, _ in ok])
        if ok and first["task"] != "longdoc":
            cells, seeds = [c for _, c in ok], [s for s, _ in ok]
            record["overall"] = task_summary(cells, seeds, seed)
            record["depths"] = [dict(depth=d["depth"], **task_summary(cells, seeds, seed,
                                                                       d["depth"]))
                                for d in first["depths"]]
            record.update(status="ok", interval=record["overall"]["interval"])
        elif ok:  # longdoc: MLM rows over documents, the mean over seeds
            record["overall"] = summarize_cells([c for _, c in ok], [s for s, _ in ok], seed)
            record.update(status="ok", buckets=[], interval=record["overall"]["interval"])
        out[key] = record
    return out


def grouped_tasks(results: dict) -> dict:
    """{key: task cell}: results' task cells with each seed group of several runs as its one
    task_seed_cells cell (the mean over its seeds) in place of its runs' cells."""
    grouped = {r for info in section(results, "groups").values() if len(info["runs"]) > 1
               for r in info["runs"]}
    cells = {k: c for k, c in section(results, "tasks").items()
             if k.partition("|")[0] not in grouped}
    cells.update(section(results, "task_seed_cells"))
    return cells


def _plain(c: dict) -> bool:
    return not c["params"].get("shuffle_positions")  # an optional parameter (record.Params)


def _cells_of(results: dict, group_map: dict, key: str) -> list[dict]:
    """The ok per-seed cells behind seed cell `key`, in the group's seed order."""
    group, _, rest = key.partition("|")
    cells = results["cells"]
    return [cells.get(f"{r}|{rest}") for r in group_map[group]["runs"]]  # None: not scored


def _pair(results, group_map, key_a, key_b, seed) -> Optional[dict]:
    a, b = _cells_of(results, group_map, key_a), _cells_of(results, group_map, key_b)
    # pair by seed INDEX: the i-th seed of one group with the i-th of the other (seeds: a's)
    seeds_a = group_map[key_a.partition("|")[0]]["seeds"]
    pairs = [(x, y, s) for x, y, s in zip(a, b, seeds_a) if has_rows(x) and has_rows(y)]
    if not pairs:
        return None
    xs, ys, seeds = zip(*pairs)
    return paired_cells(list(xs), list(ys), list(seeds), seed)


def derive(results: dict, baseline: Optional[str], seed: int = 0,
           skip: set = frozenset()) -> None:
    """Fill groups, seed_cells, reliance and differences (see the module docstring) in
    place. Pure numpy: a pair's orientation depends on labels only (the baseline is always
    b; otherwise the label later in sort order minus the earlier)."""
    group_map = groups(results, skip)
    sc = seed_cells(results, group_map, seed)
    # each seed of a group on its own too: its reliance and within-run differences stay
    # quotable per seed (kind 'baseline' / 'methods', keyed by the run's own cell keys)
    singles = {k: {"name": results["runs"][k]["name"],
                   "runs": [k], "seeds": [s], "fingerprint": g["fingerprint"]}
               for g in group_map.values() if len(g["runs"]) > 1
               for k, s in zip(g["runs"], g["seeds"])}
    every_map = {**group_map, **singles}
    every = {**sc, **seed_cells(results, singles, seed)}
    reliance, differences = {}, {}
    by_place: dict = {}
    for key, c in every.items():
        if c["status"] == "ok":
            by_place.setdefault((c["group"], c["length"]), {})[key] = c
    for (group, length), place in by_place.items():
        intact = [k for k, c in place.items() if c["method"] == "as_is" and not c["params"]]
        shuffled = [k for k, c in place.items() if c["method"] == "as_is"
                    and c["params"] == {"shuffle_positions": True}]
        if intact and shuffled and length == place[intact[0]]["trained_length"]:
            d = _pair(results, every_map, intact[0], shuffled[0], seed)
            if d is not None:
                reliance[group] = dict(d, run=place[intact[0]]["run"], length=length,
                                       intact=place[intact[0]]["overall"]["accuracy"],
                                       shuffled=place[shuffled[0]]["overall"]["accuracy"])
        plain = sorted((k for k, c in place.items() if _plain(c)),
                       key=lambda k: (place[k]["label"], k))
        base = [k for k in plain if baseline is not None and place[k]["method"] == baseline
                and not place[k]["params"].get("logn")]
        base = sorted(base, key=lambda k: place[k]["params"].get("alpha") or 0)[:1]
        for i, later in enumerate(plain):
            for earlier in plain[:i]:  # a later variant minus an earlier one; baseline is b
                ka, kb = (earlier, later) if later in base else (later, earlier)
                kind = "baseline" if kb in base else "methods"
                _add(differences, results, every_map, every, ka, kb, kind, seed,
                     baseline=place[kb]["label"] if kind == "baseline" else None)
    by_label: dict = {}
    for key, c in sc.items():
        if c["status"] == "ok" and _plain(c):
            by_label.setdefault((c["label"], c["length"], key.split("|", 1)[1]), []).append(key)
    for keys in by_label.values():
        keys = sorted(keys, key=lambda k: sc[k]["run"])
        for i, kb in enumerate(keys):
            for ka in keys[i + 1:]:
                _add(differences, results, group_map, sc, ka, kb, "runs", seed)
    results["groups"], results["seed_cells"] = group_map, sc
    if "tasks" in results:
        results["task_seed_cells"] = task_seed_cells(results, group_map, seed)
    results["reliance"], results["differences"] = reliance, differences


def _add(out, results, group_map, sc, ka, kb, kind, seed, baseline=None) -> None:
    d = _pair(results, group_map, ka, kb, seed)
    if d is None:
        return
    a, b = sc[ka], sc[kb]
    d.update(kind=kind, a=ka, b=kb, a_label=a["label"], b_label=b["label"], a_run=a["run"],
             b_run=b["run"], length=a["length"])
    if baseline is not None:
        d["baseline"] = baseline
    out[f"{ka} - {kb}"] = d
