"""Retrieval and long-document tasks in the evaluator (eval.py --tasks=...).

The generators live in posjax.data.tasks (the training pipeline mixes them in too, and data/
must not import evaluation/); here is the sweep that runs them over lengths x methods
(sweep.py, longdoc.py). Their rows' scores are posjax.evaluation.stats.task_scores, the
paired differences posjax.evaluation.derive.task_pairs, the tables and figures
posjax.evaluation.report.tasks.
"""
