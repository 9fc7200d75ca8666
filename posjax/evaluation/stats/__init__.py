"""Statistics over per-row sums, knowing nothing of results.json (pure numpy):

  intervals.py    every interval rule: bootstrap, cluster jackknife, Wilson, Newcombe, paired
                  and over seeds (each number names its method)
  task_scores.py  a task's rows as exact match and per-token accuracy with their intervals

Below the record (posjax.evaluation.results): its loader recomputes older task cells'
intervals with them.
"""
