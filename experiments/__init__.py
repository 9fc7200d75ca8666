"""Experiment drivers that need more than `eval.py --config=configs/experiments/...`: each
prepares its runs (a converted pretrained model, a fine-tune, an exact ceiling) and then calls
the evaluator. Run as `python -m experiments.NAME`; their answers are in
results/<experiment>/README.md."""
