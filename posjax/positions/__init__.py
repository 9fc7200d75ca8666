"""Position math as pure functions: no Flax, no state, nothing imported from the rest of posjax
except the leaf `posjax.errors`.

Schemes are built by name with `make(config)` and bound to the model's dims with
`scheme.bind(dims)`; the public functions below are the named formulas that users and
cross-checks call directly.
"""

from posjax.positions.absolute import hierarchical_table, sinusoidal_table
from posjax.positions.base import BOUND_FIELDS, Dims, Params, Scheme
from posjax.positions.bias import alibi_slopes
from posjax.positions.deberta import deberta_bucket
from posjax.positions.randomized import randomized_positions
from posjax.positions.registry import make, names, scheme_class
from posjax.positions.relative import nezha_table
from posjax.positions.rotary import apply_rope
from posjax.positions.t5 import t5_bucket

__all__ = [
    "BOUND_FIELDS", "Dims", "Params", "Scheme", "make", "names", "scheme_class",
    "sinusoidal_table", "hierarchical_table", "t5_bucket", "deberta_bucket", "nezha_table",
    "apply_rope", "alibi_slopes", "randomized_positions",
]
