"""`--config.<path>=<value>` overrides: the one place that parses, checks and applies them.

train.py and eval.py both go through `posjax.config.cli.parse_flags`, which takes the overrides out of
argv before absl and ml_collections' config_flags see them (config_flags would raise an
AttributeError traceback for an unknown key) and applies them here, after the config file has
loaded. Every problem is a ConfigError, one line:

- an unknown key names the key and its nearest valid keys (difflib);
- a value that does not parse as the field's type (an int field given 'abc' or '1.5', a bool
  given 'maybe') names the field, the value and the type.

Ranges (train.steps >= 1, ...) are checked afterwards by posjax.config.validation.validate, so a value
of the right type but out of range is one line too. Nothing here touches the workdir.

Values are parsed to the type posjax.schema declares for the field. Besides the keys the config
file sets, a training config accepts the optional keys posjax.schema declares (e.g.
data.split_seed) and every field of the position scheme the config names (e.g.
--config.position.scaling=ntk on a config that did not set it).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Any, Iterable, NamedTuple, Optional

from posjax import schema
from posjax.errors import ConfigError

TRUE = ("true", "t", "yes", "y", "on", "1")
FALSE = ("false", "f", "no", "n", "off", "0")
NONE = ("none", "null")


class Override(NamedTuple):
    path: str  # 'train.steps'
    raw: Optional[str]  # the text after '=' (None: a bare --config.x / --noconfig.x)
    negated: bool = False  # --noconfig.x

    @property
    def flag(self) -> str:
        return f"--{'no' if self.negated else ''}config.{self.path}"


def split_argv(argv: list, name: str = "config") -> tuple[list, list]:
    """(argv without the --<name>.* overrides, the overrides in command-line order).

    `--config.x=V`, `--config.x V` (the next word, when it is not a flag) and the boolean
    `--config.x` / `--noconfig.x` forms are recognised, as config_flags accepts them.
    """
    pattern = re.compile(rf"^--?(no)?{re.escape(name)}\.([^=]*)(?:=(.*))?$", re.S)
    rest, overrides = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":  # end of flags: the rest are positional arguments
            rest.extend(argv[i:])
            break
        m = pattern.match(arg) if i > 0 else None  # argv[0] is the program
        if m is None:
            rest.append(arg)
            i += 1
            continue
        negated, path, raw = bool(m.group(1)), m.group(2), m.group(3)
        if raw is None and not negated and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            raw = argv[i + 1]
            i += 1
        overrides.append(Override(path, raw, negated))
        i += 1
    return rest, overrides


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------
def _is_dict(node: Any) -> bool:
    return hasattr(node, "keys") and hasattr(node, "items")


def leaf_paths(config: Any, prefix: str = "") -> list:
    """Every settable dotted path of `config` (its leaves and the extra keys it accepts)."""
    out = []
    for key, value in config.items():
        path = f"{prefix}{key}"
        if _is_dict(value):
            out.extend(leaf_paths(value, path + "."))
        else:
            out.append(path)
    if not prefix:  # a section set only from config files (an empty dict today) is no leaf
        out.extend(p for p in _extra_fields(config) if p not in out and not _is_section(config, p))
    return out


def _is_section(config: Any, path: str) -> bool:
    node = config
    for part in path.split("."):
        if not _is_dict(node) or part not in node:
            return False
        node = node[part]
    return _is_dict(node)


def _is_training_config(config: Any) -> bool:
    return all(s in config and _is_dict(config[s]) for s in ("model", "position", "data"))


def _scheme_fields(config: Any) -> dict:
    """name -> dataclass field of the position scheme the config names ({} if unknown)."""
    try:
        from posjax.positions import scheme_class

        cls = scheme_class(schema.given(config, "position.name"))
    except (ConfigError, AttributeError, ImportError):
        return {}
    return {f.name: f for f in dataclasses.fields(cls)}


def _extra_fields(config: Any) -> list:
    """Optional keys a training config may gain from the command line."""
    if not _is_training_config(config):
        return []
    extra = [f"{section}.{key}" for section, keys in schema.KNOWN.items() if section in config
             for key in keys]
    extra += [f"position.{key}" for key in _scheme_fields(config)]
    return extra


def _unknown(path: str, raw: Optional[str], config: Any) -> ConfigError:
    candidates = leaf_paths(config)
    close = schema.nearest(path, candidates)
    if close:
        hint = "nearest valid keys: " + ", ".join(close)
    else:
        section = path.split(".", 1)[0]
        same = [c for c in candidates if c.startswith(section + ".")] if "." in path else []
        hint = "valid keys: " + ", ".join(same or sorted({c.split(".", 1)[0] for c in candidates}))
    return ConfigError(f"--config.{path}", raw, f"a key the config has ({hint})")


def _resolve(config: Any, path: str, raw: Optional[str]) -> tuple[Any, str, Any]:
    """(parent node, key, the type to parse to) for `path`; ConfigError if it is unknown."""
    parts = path.split(".")
    if not path or any(not p for p in parts):
        raise _unknown(path, raw, config)
    node = config
    for part in parts[:-1]:
        if part not in node or not _is_dict(node[part]):
            raise _unknown(path, raw, config)
        node = node[part]
    key = parts[-1]
    if key in node:
        if _is_dict(node[key]):
            example = next(iter(leaf_paths(node[key], path + ".")), None)
            if example is None:  # an empty section: its fields come from a config file
                raise ConfigError(f"--config.{path}", raw,
                                  "set in a config file (see configs/modernbert.py), "
                                  "not on the command line")
            raise ConfigError(f"--config.{path}", raw,
                              f"a single field inside the section (e.g. --config.{example}=...)")
        return node, key, schema.kind(path) or _field_type(node, key)
    if path in _extra_fields(config):
        if parts[0] == "position":
            field = _scheme_fields(config)[key]
            default = field.default if field.default is not dataclasses.MISSING else None
            return node, key, (type(default) if default is not None else None)
        return node, key, schema.kind(path)
    raise _unknown(path, raw, config)


def _field_type(node: Any, key: str) -> Optional[type]:
    try:
        kind = node.get_type(key)  # ConfigDict: the placeholder's type for None fields
    except (AttributeError, KeyError):
        kind = type(node[key])
    return None if kind is type(None) else kind


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------
def parse_value(override: Override, kind: Optional[type]) -> Any:
    """The override's text as a value of `kind` (None: a Python literal, else the text)."""
    field, raw = f"--config.{override.path}", override.raw
    if override.negated or raw is None:
        if kind is not bool:
            raise ConfigError(override.flag, raw, "a value: --config.FIELD=VALUE (only True/False "
                              "fields may be given bare or as --noconfig.FIELD)")
        if override.negated and raw is not None:
            raise ConfigError(override.flag, raw, "no value (--noconfig.FIELD means False)")
        return not override.negated
    text = raw.strip()
    if text.lower() in NONE:
        return None  # posjax.config.validation says whether None is allowed for this field
    if kind is bool:
        if text.lower() in TRUE + FALSE:
            return text.lower() in TRUE
        raise ConfigError(field, raw, "True or False")
    if kind is int:
        try:
            return int(text.replace("_", ""), 10)
        except ValueError:
            raise ConfigError(field, raw, "an int") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(field, raw, "a number") from None
    if kind is str:
        return raw
    if kind in (tuple, list):
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = None
        if not isinstance(value, (tuple, list)):
            raise ConfigError(field, raw, "a tuple literal, e.g. \"(('mlp', 'tensor'),)\"")
        return tuple(value) if kind is tuple else list(value)
    try:  # a field without a fixed type (None in the config, or an unlisted optional key)
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return raw


def apply(config: Any, overrides: Iterable[Override]) -> None:
    """Check and apply `overrides` to `config` in place; ConfigError on the first bad one.

    position.name goes first, so the fields of the scheme it names can follow in any order.
    """
    ordered = sorted(overrides, key=lambda o: o.path != "position.name")
    for override in ordered:
        node, key, kind = _resolve(config, override.path, override.raw)
        value = parse_value(override, kind)
        locked = getattr(node, "is_locked", False)
        if locked and key not in node:
            with node.unlocked():
                node[key] = value
        else:
            try:
                node[key] = value
            except TypeError as e:  # a ConfigDict field that refuses the parsed type
                raise ConfigError(override.flag, override.raw, str(e)) from None
