"""Retrieval and long-document tasks in the evaluator (eval.py --tasks=...).

The generators live in posjax.data.tasks (the training pipeline mixes them in too, and data/
must not import evaluation/); here are the scorers (scoring.py) and the sweep that runs them
over lengths x methods (sweep.py, longdoc.py, report.py, plots.py).
"""
