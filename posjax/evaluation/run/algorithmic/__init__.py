"""The algorithmic length-generalization benchmark in the evaluator (Delétang et al., ICLR 2023;
Ruoss et al., ACL 2023): runs trained with data.corpus='algorithmic' (configs/algorithmic.py)
scored at test lengths beyond training, per-token accuracy with intervals over seeds and
sequences, and randomized-minus-plain differences paired by seed and sequence.

  scoring.py  the test sequences (one seeded set per length, the same for every run) and
              the reference's masked accuracy per sequence, with its test-time behaviour
  sweep.py    runs x lengths, resumable, into out/results.json ('algorithmic' cells)

Its seed groups, per-length seed cells, score over test lengths and paired differences are
derived in posjax.evaluation.derive.algorithmic; its tables, figures and folder output are
posjax.evaluation.report.algorithmic.
"""
