"""Position math as pure functions: no Flax, no state, nothing imported from the rest of posjax
except the leaf `posjax.errors`.

Schemes are built by name with `make(config)` and bound to the model's dims with
`scheme.bind(dims)`; the public functions below are the named formulas that users and
cross-checks call directly. Every module of this package is imported here, so each scheme
class registers itself (`@register`) by being defined in one of them.
"""

import importlib
import pkgutil

from posjax.positions.absolute import hierarchical_table, sinusoidal_table
from posjax.positions.base import BOUND_FIELDS, HOOKS, Dims, Params, Scheme
from posjax.positions.bias import alibi_slopes
from posjax.positions.deberta import deberta_bucket
from posjax.positions.extension import (ALIASES, AS_IS, AS_IS_DOC, Extension, ExtendSettings,
                                        NotApplicable)
from posjax.positions.randomized import randomized_positions
from posjax.positions.registry import (config_fields, extension_methods, make, method_owner,
                                       names, register, scheme_class, suggest)
from posjax.positions.relative import nezha_table
from posjax.positions.rotary import apply_rope
from posjax.positions.t5 import t5_bucket

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")

__all__ = [
    "BOUND_FIELDS", "HOOKS", "Dims", "Params", "Scheme", "make", "names", "scheme_class",
    "register", "config_fields", "extension_methods", "method_owner", "suggest",
    "ALIASES", "AS_IS", "AS_IS_DOC", "Extension", "ExtendSettings", "NotApplicable",
    "sinusoidal_table", "hierarchical_table", "t5_bucket", "deberta_bucket", "nezha_table",
    "apply_rope", "alibi_slopes", "randomized_positions",
]
