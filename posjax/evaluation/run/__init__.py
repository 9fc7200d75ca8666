"""Plan, score, continue training: the steps that read runs, their checkpoints and held-out
rows, and write the scored cells of results.json (a sweep redraws report/'s tables as it goes).

  sweep.py           runs x lengths x methods into --out/results.json, resumable
  batches.py         the held-out rows a cell scores (one seeded set per length)
  metrics.py         a cell's per-row sums (loss, correct, count, cluster) and buckets
  restore.py         a run from its workdir: config, checkpoint, weights digest
  reuse.py           cells of the same weights already scored in another results folder
  continued.py       continued training from a run's checkpoint at a longer length
  recovery.py        the recovery curve: continued training scored at each step count
  source_archive.py  a continued run's source weights kept with its results
  options.py         every eval option declared once (flags, Request, experiment configs)
  corpora_check.py   the held-out corpus a run may be scored on
  eta.py             the plan line and time left
  tasks/             the retrieval and long-document task sweep
  algorithmic/       the algorithmic benchmark's scorer and sweep
"""
