"""ml_collections config files: `get_config(arg)` each, on top of posjax/config/defaults.py.

A package so that the experiment configs can `from configs.experiments.common import ...`
(eval.py runs from the repository root, which is then on sys.path).
"""
