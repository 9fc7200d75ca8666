"""The figures of an evaluation, one job per module (matplotlib's object API, no pyplot state):

  lines.py        what is drawn: one Line per (run, method), its cells, its not-applicable
                  cells, and the one accessor of a cell's seeds
  style.py        how it looks: the palette, the length axis, the trained-length mark, the
                  not-applicable marker, data-driven limits, the atomic PNG write
  curves.py       a metric against length: one axes, or small multiples past MAX_PER_AXES lines
  ranking.py      the ranking chart at fixed multiples of the training length
  differences.py  the paired difference from --baseline against length

posjax.evaluation.report.plots (MLM sweeps) and posjax.evaluation.report.tasks.plots (tasks)
choose which figures a results folder gets.
"""
