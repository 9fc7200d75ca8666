"""posjax: Transformer position encodings in JAX/Flax, with an extrapolation evaluator."""

__version__ = "0.1.0"
