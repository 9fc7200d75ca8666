"""results.json: the one module that reads and writes it, and the small readers of its cells
that every writer of it shares (the tables in posjax.evaluation.report.report, the recovery section,
the plots), so none of them imports another to read a cell.

    load(folder)        -> Results: read, migrate (below), check against
                           posjax.evaluation.results.record
    loads(text, where)  -> Results: the same from text
    save(folder, results): check, then write atomically (temp file + rename)
    dumps(results)      -> the file's text (indented; each per-row list on one line)
    section(results, name) -> one optional top-level section, {} where the file has none

Migrations (older files to today's record; here and nowhere else), applied on load:
  - schema 1 (no per-row sums): refused with one line; it cannot carry intervals
  - workdirs recorded as absolute paths: made relative to the results folder, in the run and
    cell keys too (an older file resumes under today's keys)
  - cells and task cells recorded before they named their seeds: n_seeds 1, seeds [the run's
    training seed], interval (their overall's; for an MLM cell older still, "bootstrap over
    <what it resampled> (recorded before cells named their interval)"), as the sweeps write
    today
  - recovery curves recorded before the schedule was an option: schedule 'linear' (the only
    one then)
  - retrieval task cells recorded before their intervals were named: overall and depths
    recomputed from their rows (tasks.scoring: Wilson), as the task sweep writes today
A file that needs none of them reads and writes back as the same bytes
(tests/evaluation/test_results_record.py holds every committed results.json to that, or to
equal-but-for-MIGRATION_FIELDS where a migration applied).
"""

from __future__ import annotations

import json
import os
import re
from typing import Optional

from posjax import schema, storage
from posjax.evaluation.results import record_check
from posjax.evaluation.results.record import Results
from posjax.evaluation.results.record_check import (  # noqa: F401 (results_file.RecordError)
    RecordError)
from posjax.evaluation.stats import task_scores as task_scoring

SCHEMA = "posjax.extrapolation/2"
OLD_SCHEMAS = ("posjax.extrapolation/1",)
RESULTS = "results.json"
# Fields a migration may add to a file that predates them (the round-trip test allows these).
MIGRATION_FIELDS = frozenset({"n_seeds", "seeds", "interval", "overall", "depths",
                              "schedule"})


class ResultsFileError(ValueError):
    """A results folder this version cannot read: one line naming the file and what to do."""


def section(results: Results, name: str) -> dict:
    """Top-level section `name` (differences, recovery, tasks, algorithmic, ...): optional in
    the record (posjax.evaluation.results.record.Results); a file without it has no entries."""
    return results.get(name) or {}  # type: ignore[misc]


def path_of(folder: str) -> str:
    return storage.join(folder, RESULTS)


def schema_problem(found) -> Optional[str]:
    """Why a file of schema `found` cannot be read (None when it can)."""
    if found == SCHEMA:
        return None
    if found in OLD_SCHEMAS:
        return ("it was written before per-row sums and intervals (schema 1) and cannot carry "
                "intervals: rerun eval.py on its workdirs")
    return f"its schema is {found!r}, not {SCHEMA!r}"


def loads(text: str, where: str = RESULTS, folder: Optional[str] = None) -> Results:
    """The record in `text` (of file `where`), migrated and checked; ResultsFileError when
    it is not JSON, not of this schema, or does not match posjax.evaluation.results.record.
    `folder`: the results folder (workdirs are made relative to it; None leaves them)."""
    try:
        results = json.loads(text)
    except ValueError as e:
        raise ResultsFileError(f"{where} is not readable JSON ({type(e).__name__})") from None
    if not isinstance(results, dict):
        raise ResultsFileError(f"{where} holds {type(results).__name__}, not a results record")
    why = schema_problem(results.get("schema"))
    if why:
        raise ResultsFileError(f"{where}: {why}")
    migrate(results, folder)
    try:
        record_check.check(results, Results)
    except RecordError as e:
        raise ResultsFileError(f"{where}: {e}") from None
    return results


def load(folder: str) -> Results:
    """folder/results.json as a checked record (see loads); ResultsFileError when missing."""
    path = path_of(folder)
    if not storage.exists(path):
        raise ResultsFileError(f"{folder} holds no {RESULTS}: give a folder eval.py --out "
                               "wrote")
    try:
        text = storage.read_bytes(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ResultsFileError(f"{path} is not readable ({type(e).__name__})") from None
    return loads(text, path, folder)


def dumps(results: Results) -> str:
    """JSON with an indent, except the per-row lists (one line each, not one line a number)."""
    holders: dict = {}
    # 'tasks', 'algorithmic': the cells of posjax.evaluation.run.tasks / .algorithmic, if any
    sections: dict = {s: {} for s in ("cells", "tasks", "algorithmic") if s in results}
    for name, compact in sections.items():
        for key, c in results[name].items():  # type: ignore[literal-required]
            if "rows" in c:
                token = f"@@rows{len(holders)}@@"
                holders[token] = json.dumps(c["rows"], sort_keys=True, separators=(",", ":"))
                compact[key] = dict(c, rows=token)
            else:
                compact[key] = c
    text = json.dumps(dict(results, **sections), indent=1, sort_keys=True)
    # one pass over the text (a replace per cell rescans it: quadratic in the cells)
    return re.sub(r'"(@@rows\d+@@)"', lambda m: holders[m.group(1)], text)


def save(folder: str, results: Results) -> None:
    """Check `results` against the record, then write folder/results.json atomically: a
    writer that left out a required field fails here, naming it, before the file has it."""
    try:
        record_check.check(results, Results)
    except RecordError as e:
        raise ResultsFileError(f"not writing {path_of(folder)}: {e}") from None
    storage.write_text(path_of(folder), dumps(results))


# ------------------------------------------------------------------------------ migrations


def migrate(results: dict, folder: Optional[str] = None) -> dict:
    """An older schema-2 record brought to today's, in place (the module docstring)."""
    if folder is not None:
        relative_keys(results, folder)
    runs = results.get("runs") or {}
    seed = interval_seed(results)

    def one_seed(key: str, c: dict, interval: str) -> None:
        if "n_seeds" not in c:
            config = (runs.get(run_of(key)) or {}).get("config") or {}
            c.update(n_seeds=1, seeds=[int(schema.value(config, "seed") or 0)])
        c.setdefault("interval", interval)

    for key, c in (results.get("cells") or {}).items():
        # defensive: a broken cell is left for the check to name
        if isinstance(c, dict) and c.get("status") == "ok" and "rows" in c \
                and isinstance(c.get("overall"), dict):
            o = c["overall"]
            one_seed(key, c, o["interval"] if "interval" in o else
                     f"bootstrap over {o.get('resampled', 'rows')} (recorded before cells "
                     "named their interval)")
    for key, c in (results.get("tasks") or {}).items():
        if not isinstance(c, dict) or c.get("status") != "ok" or "rows" not in c:
            continue
        rows = c["rows"]
        if c.get("task") != "longdoc" and "interval" not in c.get("overall", {}):
            c["overall"] = task_scoring.summary(rows, seed=seed)
        if "depth" in rows and any("interval" not in d for d in c.get("depths", [])):
            c["depths"] = task_scoring.by_depth(rows, rows["depth"], seed=seed)
        one_seed(key, c, c["overall"]["interval"])
    for curve in (results.get("recovery") or {}).values():
        if isinstance(curve, dict):
            curve.setdefault("schedule", "linear")
    return results


def relative_workdir(workdir: str, out_dir: str) -> str:
    """`workdir` as a path relative to the results folder (absolute paths tie a results file
    to one machine; relative ones survive moving or cloning the tree that holds both). Paths
    with no relative form (another Windows drive, a gs:// URI on either side) stay absolute."""
    if not (storage.is_local(workdir) and storage.is_local(out_dir)) or not os.path.isabs(workdir):
        return workdir
    try:
        return os.path.relpath(workdir, os.path.abspath(out_dir))
    except ValueError:
        return workdir


def _rekey(key: str, out_dir: str) -> str:
    """A run key ('<workdir>@<step>') or cell key ('<run key>|...') with an absolute workdir
    made relative; relative keys come back unchanged."""
    head, bar, tail = key.partition("|")
    workdir, at, step = head.rpartition("@")
    if not at or not os.path.isabs(workdir):
        return key
    return f"{relative_workdir(workdir, out_dir)}@{step}{bar}{tail}"


def relative_keys(results: dict, out_dir: str) -> dict:
    """Rekey (in place) a results dict written with absolute workdir paths, so an older
    results.json resumes under today's keys (its finished cells are found, not redone) and
    its records name workdirs the same way as new ones. Returns `results`."""
    for name in ("runs", "cells", "tasks", "algorithmic"):
        if name in ("tasks", "algorithmic") and name not in results:
            continue
        entries = results.get(name) or {}
        rekeyed = {}
        for key, entry in entries.items():
            if isinstance(entry, dict) and isinstance(entry.get("workdir"), str):
                entry["workdir"] = relative_workdir(entry["workdir"], out_dir)
            rekeyed[_rekey(key, out_dir)] = entry
        results[name] = rekeyed
    return results


# ------------------------------------------------------------------- small readers of cells


def has_rows(c: Optional[dict]) -> bool:
    """An evaluated cell (status ok) that kept its per-row sums, which intervals need."""
    return c is not None and c["status"] == "ok" and "rows" in c


def method_order(c: dict) -> tuple:
    """A cell's place among its run's methods in tables and figures: the registry's order."""
    from posjax.evaluation.methods import METHODS  # imports JAX: only when tables sort

    m = c["method"]
    return (METHODS.index(m) if m in METHODS else 99, c["params"].get("alpha") or 0,
            bool(c["params"].get("logn")), bool(c["params"].get("shuffle_positions")))


def run_of(key: str) -> str:
    """The run part of a cell key ('<run>|<variant>|L=<length>...')."""
    return key.partition("|")[0]


def recovery_runs(results: Results) -> set:
    """Run keys of continued-training checkpoints (shown in the recovery table only)."""
    out = set()
    for curve in section(results, "recovery").values():
        for step, key in curve["cells"].items():
            if int(step) > 0:
                out.add(run_of(key))
    return out


def interval_seed(results: dict) -> int:
    """The seed of the evaluation's bootstrap draws: settings.seed (0 in a hand-made record
    without settings, before it is checked: the migration above runs first)."""
    settings = results.get("settings") or {}
    return int(settings.get("seed") or 0)


IDENTICAL = "identical (same scores)"


def interval_text(d: Optional[dict], name: str, signed: bool = False, digits: int = 4,
                  missing: str = "") -> str:
    """'est [lo, hi]' of d[name], d[name_lo], d[name_hi]; `missing` where d has no interval;
    'identical' for a paired difference of two cells that scored every token alike (no
    interval: it is exactly 0)."""
    if not d or d.get(name) is None or d.get(f"{name}_lo") is None:
        return missing
    if d.get("identical"):
        return IDENTICAL
    f = f"{'+' if signed else ''}.{digits}f"
    return f"{d[name]:{f}} [{d[name + '_lo']:{f}}, {d[name + '_hi']:{f}}]"


def cell_seeds(c: dict) -> tuple[int, list]:
    """(n_seeds, seeds) of any cell or seed cell. Every evaluated cell and every seed group's
    cell records them; a run's own not-applicable cell does not: it is its run's one seed."""
    if "n_seeds" not in c:
        return 1, []
    return c["n_seeds"], c["seeds"]


def seeds_words(n: int, seeds=()) -> str:
    """'1 seed' / '3 seeds (0, 1, 2)' ('3 seeds' without the list): every table and figure
    says how many training seeds it averages."""
    if n == 1:
        return "1 seed"
    return f"{n} seeds" + (f" ({', '.join(str(x) for x in seeds)})" if seeds else "")
