"""Position math as pure functions: no Flax, no state, nothing imported from the rest of posjax
except the leaf `posjax.errors`.

Schemes are built by name with `make(config)`; the public functions below are the named
formulas that users and cross-checks call directly.
"""

from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.registry import make, names, scheme_class

# Public formula functions are re-exported lazily so a scheme module that is being worked on
# cannot break `import posjax.positions`.
_PUBLIC = {
    "sinusoidal_table": "absolute",
    "hierarchical_table": "absolute",
    "t5_bucket": "t5",
    "deberta_bucket": "deberta",
    "nezha_table": "relative",
    "apply_rope": "rotary",
    "alibi_slopes": "bias",
    "randomized_positions": "randomized",
}


def __getattr__(name):
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(f"posjax.positions.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module 'posjax.positions' has no attribute {name!r}")


__all__ = ["Dims", "Params", "Scheme", "make", "names", "scheme_class", *_PUBLIC]
