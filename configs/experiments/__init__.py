"""Experiment configs for eval.py: each names the training runs it needs and the sweep to run.

    python eval.py --config=configs/experiments/logn.py --out=bench/extrapolation/logn

trains every run whose workdir has no finished checkpoint yet (posjax.training), then evaluates
them all (posjax.evaluation). See posjax/evaluation/experiment.py for the fields.
"""
