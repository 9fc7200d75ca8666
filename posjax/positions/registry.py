"""Name -> scheme class. The only place in posjax that knows every scheme name."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from posjax.errors import ConfigError
from posjax.positions.absolute import (Hierarchical, Learned, Multiplicative, NoPosition,
                                       Sinusoidal)
from posjax.positions.base import BOUND_FIELDS, Scheme
from posjax.positions.bias import Alibi, Kerple, Sandwich
from posjax.positions.complex_order import ComplexOrder
from posjax.positions.conv import ConvPosition
from posjax.positions.cope import Cope
from posjax.positions.deberta import Deberta
from posjax.positions.fire import Fire
from posjax.positions.fox import Fox
from posjax.positions.pope import Pope
from posjax.positions.recurrent import Floater
from posjax.positions.relative import Nezha, Shaw
from posjax.positions.rerope import LeakyReRope, ReRope
from posjax.positions.rope2d import Rope2d
from posjax.positions.rotary import Rope
from posjax.positions.xpos import XPos
from posjax.positions.t5 import T5
from posjax.positions.tupe import Tupe
from posjax.positions.xl import TransformerXL

# config name -> scheme class
_SCHEMES: dict[str, type[Scheme]] = {
    # no position information at all (NoPE baseline)
    "none": NoPosition,
    # absolute, added (or multiplied) once to token embeddings
    "learned": Learned,
    "hierarchical": Hierarchical,
    "sinusoidal": Sinusoidal,
    "multiplicative": Multiplicative,
    "complex_order": ComplexOrder,
    "floater": Floater,
    # convolutional: position only from the padding at the sequence ends (embed or per layer)
    "conv": ConvPosition,
    # rotary family (scalings are the `scaling` field of `rope`)
    "rope": Rope,
    "xpos": XPos,
    "rerope": ReRope,
    "leaky_rerope": LeakyReRope,
    "pope": Pope,  # polar: softplus magnitudes, position-only phases
    "rope2d": Rope2d,  # image patches: (row, column) positions [B, L, 2], axial or mixed
    # relative, inside attention
    "shaw": Shaw,
    "nezha": Nezha,
    "xl": TransformerXL,
    "t5": T5,
    "deberta": Deberta,
    "tupe": Tupe,
    # linear-bias family
    "alibi": Alibi,
    "kerple": Kerple,
    "sandwich": Sandwich,
    "fire": Fire,
    # data-dependent decay bias (per-token forget gates, prepared once per forward)
    "fox": Fox,
    # contextual: positions are gated counts of keys (running sums carried across key blocks)
    "cope": Cope,
}


def names() -> list[str]:
    """All registered scheme names, sorted."""
    return sorted(_SCHEMES)


def scheme_class(name: str) -> type[Scheme]:
    """The class registered under `name`; ConfigError listing known names otherwise."""
    if name not in _SCHEMES:
        raise ConfigError("position.name", name, f"one of {', '.join(names())}")
    return _SCHEMES[name]


def make(config: Mapping[str, Any] | str, **overrides) -> Scheme:
    """Build a scheme from a config mapping `{"name": ..., field: value, ...}` or a name.

    Works with plain dicts and ml_collections.ConfigDict. Unknown fields raise ConfigError
    naming the field and listing the fields the scheme has.
    """
    if isinstance(config, str):
        fields = {"name": config}
    else:
        fields = dict(config.items()) if hasattr(config, "items") else dict(config)
    fields.update(overrides)
    if "name" not in fields:
        raise ConfigError("position.name", None, f"one of {', '.join(names())}")
    name = fields.pop("name")
    cls = scheme_class(name)
    allowed = {f.name for f in dataclasses.fields(cls)} - set(BOUND_FIELDS)
    for key in fields:
        if key in BOUND_FIELDS:
            raise ConfigError(f"position.{key}", fields[key],
                              "unset: it is bound from the model config (scheme.bind)")
        if key not in allowed:
            raise ConfigError(
                f"position.{key}",
                fields[key],
                f"'{name}' has no such field; its fields are {', '.join(sorted(allowed)) or '(none)'}",
            )
    return cls(**fields)
