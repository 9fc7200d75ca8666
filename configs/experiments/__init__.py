"""Experiment configs for eval.py: each names the training runs it needs and the sweep to run.

    python eval.py --config=configs/experiments/logn.py --out=results/logn

trains every run whose workdir has no finished checkpoint yet (posjax.training), each with
training seeds 0, 1 and 2 (common.SEEDS; a rerun trains only the seeds not yet trained), then
evaluates them all (posjax.evaluation), every table cell the mean over the seeds. The fields an
experiment may set are the options of posjax/evaluation/run/options.py with an
`experiment` path; the runs are trained by
posjax/evaluation/driver.py (train_experiment_runs). Committed answers:
results/<experiment>/README.md.
"""
