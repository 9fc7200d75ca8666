"""Name -> scheme class, filled by `@register` at each class; and the questions about schemes
and their length-extension methods that the rest of posjax asks by name.

    @register
    @dataclasses.dataclass(frozen=True)
    class Alibi(Scheme):
        name: ClassVar[str] = "alibi"

posjax.positions imports every module of the package, so a new module registers its schemes
by existing; nothing else lists scheme names.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Mapping, Optional

from posjax.errors import ConfigError
from posjax.positions.base import BOUND_FIELDS, Scheme

# config name -> scheme class, in registration order
_SCHEMES: dict[str, type[Scheme]] = {}


def register(cls: type[Scheme]) -> type[Scheme]:
    """Class decorator: make `cls` available as `position.name = cls.name`."""
    if not (isinstance(cls, type) and issubclass(cls, Scheme) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"@register takes a Scheme dataclass, not {cls!r}")
    name = cls.name
    if name in _SCHEMES and _SCHEMES[name] is not cls:
        raise ValueError(f"position name '{name}' is taken by {_SCHEMES[name].__module__}."
                         f"{_SCHEMES[name].__qualname__}")
    _SCHEMES[name] = cls
    return cls


def names() -> list[str]:
    """All registered scheme names, sorted."""
    return sorted(_SCHEMES)


def suggest(value: Any, choices) -> str:
    """'one of a, b, c', led by the nearest choices to `value` when there are any ('did you
    mean rope? one of ...'), for the `allowed` part of a ConfigError."""
    choices = list(choices)
    close = difflib.get_close_matches(str(value), choices, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return f"{hint}one of {', '.join(choices)}"


def scheme_class(name: str) -> type[Scheme]:
    """The class registered under `name`; ConfigError naming the nearest names otherwise."""
    if name not in _SCHEMES:
        raise ConfigError("position.name", name, suggest(name, names()))
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
    allowed = set(config_fields(cls))
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


def config_fields(cls: type[Scheme]) -> dict:
    """field name -> default of the fields a config may set (the bound ones excluded)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in BOUND_FIELDS:
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = None
    return out


# -- length-extension methods, by name --------------------------------------------------------
def extension_methods() -> dict:
    """Every method some registered scheme offers ('as_is' first, then in registration order),
    with its one line."""
    out: dict = {}
    for cls in _SCHEMES.values():
        for method, doc in cls.offered_methods().items():
            out.setdefault(method, doc)
    return out


def method_owner(method: str) -> Optional[type[Scheme]]:
    """The first registered class that offers `method` (its refusal explains the method to
    schemes without it); None for 'as_is' and unknown names."""
    for cls in _SCHEMES.values():
        if method in cls.extend_methods:
            return cls
    return None
