"""The algorithmic benchmark's outputs (posjax.evaluation.run.algorithmic scores it):

  tables.py   results.md / results.csv and the summary's lines
  plots.py    accuracy against length per task, and the differences
  output.py   writes the folder (results.json, its derived sections, tables, figures)
"""
