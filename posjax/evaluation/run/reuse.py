"""Cells scored before, taken instead of scored again: from other results folders (eval.py
--reuse=DIR,...) and from the local cell cache (--cell_cache: posjax's user cache dir,
cells/).

A cell is the same cell when its run has the same weights (results.json's runs[...]['weights'],
the sha256 of the checkpoint's params, so neither the workdir's name nor its place matters)
at the same checkpoint step, the same method variant, length and held-out settings (its key
past the run: what a rerun in one folder matches) and the same method options (rope_factor,
rerope_window, leaky_factor, which the key does not hold). Only evaluated cells (status ok,
with their per-row sums) are taken; a reused cell is marked 'reused': {from, key}.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Optional

from posjax import storage, user_cache
from posjax.errors import ConfigError
from posjax.evaluation.results import results_file

OPTIONS = ("rope_factor", "rerope_window", "leaky_factor")
CACHE = "cells"
# fields of a cell record that name where it was scored, replaced by this folder's
LOCAL = ("run", "workdir", "recovery", "reused")


def identity(weights: str, step: int, rest: str, options: dict) -> str:
    return json.dumps([weights, int(step), rest, [options.get(k) for k in OPTIONS]])


def cache_dir(environ=None) -> str:
    return user_cache.directory(os.environ if environ is None else environ, CACHE)


class Reuse:
    """The cells of `folders` and of the cache (when `cache` is a directory), by identity."""

    def __init__(self, folders: list[str], cache: Optional[str], options: dict):
        self.options = {k: options.get(k) for k in OPTIONS}
        self.cache = cache
        self.found: dict = {}
        self.sources = list(folders)
        for folder in folders:
            self._index(folder)

    def _index(self, folder: str) -> None:
        try:
            results = results_file.load(folder)
        except results_file.ResultsFileError as e:
            raise ConfigError("reuse", folder, f"results folders holding a {results_file.RESULTS}"
                              f" this version reads, written by eval.py --out ({e})") from None
        settings = results["settings"]
        # each option is optional in the record (record.Settings): None where not recorded
        if any(settings.get(k) != v for k, v in self.options.items()):
            return  # its cells were scored with other method options
        for key, c in results["cells"].items():
            run_key, _, rest = key.partition("|")
            entry = results["runs"].get(run_key)  # None: a cell of a run it does not list
            # weights: optional (record.Run), absent in runs recorded before it
            if not results_file.has_rows(c) or entry is None or not entry.get("weights"):
                continue
            self.found.setdefault(identity(entry["weights"], entry["step"], rest, self.options),
                                  (c, {"from": folder, "key": key}))

    def _file(self, ident: str) -> str:
        return os.path.join(self.cache, hashlib.sha256(ident.encode()).hexdigest()[:32] + ".json")

    def find(self, weights: Optional[str], step: int, rest: str) -> Optional[dict]:
        """A copy of the cell scored before, marked reused, without the fields of its own
        folder; None where there is none."""
        if not weights:
            return None
        ident = identity(weights, step, rest, self.options)
        hit = self.found.get(ident)
        if hit is None and self.cache is not None and os.path.exists(self._file(ident)):
            try:
                with open(self._file(ident), encoding="utf-8") as f:
                    hit = (json.load(f), {"from": f"cell cache {self.cache}"})
            except (OSError, ValueError):
                hit = None  # a damaged cache entry is scored again
        if hit is None or not results_file.has_rows(hit[0]):
            return None
        cell, source = hit
        return dict({k: v for k, v in cell.items() if k not in LOCAL}, reused=source)

    def store(self, weights: Optional[str], step: int, rest: str, record: dict) -> None:
        """Keep a scored cell in the cache (when there is one)."""
        if self.cache is None or not weights or not results_file.has_rows(record):
            return
        os.makedirs(self.cache, exist_ok=True)
        storage.write_text(self._file(identity(weights, step, rest, self.options)),
                           json.dumps({k: v for k, v in record.items() if k not in LOCAL}))
