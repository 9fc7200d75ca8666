"""Writing an algorithmic results folder (no JAX: the summary's --rewrite uses it too):
results.json with its derived sections, results.md, results.csv and the figures."""

from __future__ import annotations

import time

from posjax.evaluation import derive
from posjax.evaluation.results import results_file
from posjax.evaluation.report.algorithmic import plots, tables
from posjax.evaluation.results.record import Results


def write(out_dir: str, results: Results, final: bool = True) -> list[str]:
    """results.json; with `final`, first its derived sections, then the tables and figures.
    Returns the names of the files written."""
    if final:
        derive.derive(results)  # posjax.evaluation.derive: every derived section
    results["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results_file.save(out_dir, results)
    if not final:
        return [results_file.RESULTS]
    tables.write(out_dir, results)
    figures = plots.write_all(out_dir, results)
    return [results_file.RESULTS, "results.md", "results.csv"] + [p.rsplit("/", 1)[-1]
                                                            for p in figures]
