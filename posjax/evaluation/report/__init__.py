"""What a reader sees of an evaluation: tables, words and figures, from the record and its
derived sections (posjax.evaluation.derive), never from a model:

  report.py           results.json's lifecycle in --out, results.md and results.csv
  report_words.py     the words the tables and figures share (lengths, image grids, seeds)
  plots.py            which figures a results folder gets (figures/ draws them)
  figures/            one figure job per module (lines, style, curves, ranking, differences)
  recovery_report.py  the recovery table of results.md
  recovery_seeds.py   the recovery answer over seeds (recovery_answer.md/.json, a PNG)
  run_differences.py  paired differences between runs of one results.json (a command)
  rebaseline.py       another baseline's paired tables from a committed results.json (a command)
  tasks/              the task cells' tables and figures
  algorithmic/        the algorithmic benchmark's tables, figures and folder output
"""
