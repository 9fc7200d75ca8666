"""The algorithmic length-generalization benchmark in the evaluator (Delétang et al., ICLR 2023;
Ruoss et al., ACL 2023): runs trained with data.corpus='algorithmic' (configs/algorithmic.py)
scored at test lengths beyond training, per-token accuracy with intervals over seeds and
sequences, and randomized-minus-plain differences paired by seed and sequence.

  scoring.py  the test sequences (one seeded set per length, the same for every run) and
              the reference's masked accuracy per sequence, with its test-time behaviour
  sweep.py    runs x lengths, resumable, into out/results.json ('algorithmic' cells)
  derive.py   seed groups, per-length seed cells, the score over test lengths, and the
              paired differences (per task, and averaged over tasks)
  tables.py   results.md / results.csv and the summary's lines
  plots.py    accuracy against length per task, and the differences
  output.py   writes the folder (results.json, its derived sections, tables, figures)
"""
