"""ml_collections config files: `get_config(arg)` each; `configs/base.py` holds every default.

A package so that the scheme configs can `from configs import base` (train.py runs from the
repository root, which is then on sys.path).
"""
