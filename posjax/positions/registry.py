"""Name -> scheme class. The only place in posjax that knows every scheme name.

Classes are imported lazily from "module:Class" strings so that importing the registry stays
cheap and one broken scheme module cannot break the others.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Mapping

from posjax.errors import ConfigError
from posjax.positions.base import Scheme

# config name -> "module inside posjax.positions:ClassName"
_SCHEMES: dict[str, str] = {
    # no position information at all (NoPE baseline)
    "none": "absolute:NoPosition",
    # absolute, added (or multiplied) once to token embeddings
    "learned": "absolute:Learned",
    "hierarchical": "absolute:Hierarchical",
    "sinusoidal": "absolute:Sinusoidal",
    "multiplicative": "absolute:Multiplicative",
    "complex_order": "complex_order:ComplexOrder",
    "floater": "recurrent:Floater",
    # rotary family (scalings are the `scaling` field of `rope`)
    "rope": "rotary:Rope",
    "xpos": "rotary:XPos",
    "rerope": "rerope:ReRope",
    "leaky_rerope": "rerope:LeakyReRope",
    # relative, inside attention
    "shaw": "relative:Shaw",
    "nezha": "relative:Nezha",
    "xl": "xl:TransformerXL",
    "t5": "t5:T5",
    "deberta": "deberta:Deberta",
    "tupe": "tupe:Tupe",
    # linear-bias family
    "alibi": "bias:Alibi",
    "kerple": "bias:Kerple",
    "sandwich": "bias:Sandwich",
    "fire": "fire:Fire",
}


def names() -> list[str]:
    """All registered scheme names, sorted."""
    return sorted(_SCHEMES)


def scheme_class(name: str) -> type[Scheme]:
    """The class registered under `name`; ConfigError listing known names otherwise."""
    if name not in _SCHEMES:
        raise ConfigError("position.name", name, f"one of {', '.join(names())}")
    module_name, class_name = _SCHEMES[name].split(":")
    module = importlib.import_module(f"posjax.positions.{module_name}")
    return getattr(module, class_name)


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
    allowed = {f.name for f in dataclasses.fields(cls)}
    for key in fields:
        if key not in allowed:
            raise ConfigError(
                f"position.{key}",
                fields[key],
                f"'{name}' has no such field; its fields are {', '.join(sorted(allowed)) or '(none)'}",
            )
    return cls(**fields)
