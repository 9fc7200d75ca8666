"""The fused position terms of the flash attention kernels, one module per scheme family,
each registered by the scheme classes it computes (`@term_for`; the contract: base.py).
Importing this package registers them all; flash, vjp, layout and dispatch only call the
hooks of whatever term a scheme's class maps to."""

from posjax.kernels.terms import alibi, deberta, fox, kerple, rope, t5, tables  # noqa: F401
from posjax.kernels.terms.base import REGISTRY, Built, Call, Term, Tile, term_class, term_for

__all__ = ["REGISTRY", "Built", "Call", "Term", "Tile", "term_class", "term_for"]
