"""The one step between scoring and reporting: every derived section of results.json,
recomputed from the scored cells (pure numpy; no JAX).

  - sweeps over lengths and methods (`cells`): groups, seed_cells, reliance, differences and
    the task seed cells (posjax.evaluation.derive.seeds);
  - the algorithmic benchmark (`algorithmic`): its groups, seed cells, scores, randomized
    minus plain differences and their averages (posjax.evaluation.derive.algorithmic).

The tables, the words, the figures and `python -m posjax.evaluation.summary` read only the
cells and what this leaves; a file written mid-sweep lacks the derived sections, and running
this again on the same cells gives the same numbers.
"""

from __future__ import annotations

from typing import Optional

from posjax.evaluation.derive import algorithmic, seeds
from posjax.evaluation.results import results_file
from posjax.evaluation.results.record import Results


def recorded_baseline(results: Results) -> Optional[str]:
    """The --baseline method the run recorded (None: no baseline differences)."""
    return results_file.section(results, "settings").get("baseline")


def derive(results: Results, baseline: Optional[str] = None) -> Results:
    """Fill every derived section of `results` in place; returns it. `baseline`: the method
    each 'baseline' difference is taken from (None: none; recorded_baseline gives the run's
    own). An algorithmic record (no length x method cells) gets only its own sections."""
    if results["cells"] or not results_file.section(results, algorithmic.SECTION):
        seeds.derive(results, baseline, results_file.interval_seed(results),
                     skip=results_file.recovery_runs(results))
    if results_file.section(results, algorithmic.SECTION):
        algorithmic.derive(results)
    return results
