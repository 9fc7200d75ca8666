"""The config schema: every field of a training config, declared once.

Each `Field` holds a field's path, type, default, one-line doc and check. From this one table:

- `default_config()` builds the default ConfigDict (posjax.config.defaults adds the size variants);
- `KNOWN` lists the accepted keys of each section (posjax.config.validation refuses the others) and
  `nearest` picks the ones to suggest for an unknown key (validation, posjax.config.overrides);
- `kind(path)` types a `--config.a.b=v` override;
- `checked(config, path)` reads a field and checks it (one ConfigError line naming the field,
  the value and what is allowed); `check_all(config)` checks every field;
- `view(config)` is the read-only view code reads: every schema field present (a config saved
  before a field existed gets its default here, the one place that fills them), read-only.

config.position is not declared here: its fields are those of the dataclass of the scheme
`position.name` registers (posjax.positions), with the defaults and checks written there.
Sub-sections owned by one module (data.synthetic, data.patches, data.tasks, mesh.rules) are one
field each here; their inner keys are declared and checked by that module.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Iterable, Optional

import ml_collections
from ml_collections.config_dict import placeholder

from posjax.errors import ConfigError
from posjax.schema.fields import (  # noqa: F401  (the names the rest of posjax reads from here)
    ACTIVATIONS,
    ATTENTION,
    CORPORA,
    DEFAULT_POSITION,
    DTYPES,
    EMBEDDING_STYLES,
    FIELDS,
    MIN_VOCAB,
    MLP_KINDS,
    NAN_POLICIES,
    PRESETS,
    REMAT,
    SCHEDULES,
    SECTIONS,
    TASK_LOSSES,
    TOKENIZERS,
    TOP_LEVEL,
    Field,
    is_int,
    is_real,
)

BY_PATH: dict[str, Field] = {f.path: f for f in FIELDS}
KNOWN: dict[str, tuple] = {
    section: tuple(f.key for f in FIELDS if f.section == section)
    for section in SECTIONS if section != "position"
}


def nearest(path: str, candidates: Iterable[str], n: int = 3) -> list:
    """The closest valid keys to `path`: whole dotted paths first, then by last component."""
    candidates = list(candidates)
    close = difflib.get_close_matches(path, candidates, n=n, cutoff=0.6)
    if len(close) < n:
        last = path.rsplit(".", 1)[-1]
        tails = {c.rsplit(".", 1)[-1]: c for c in candidates}
        for tail in difflib.get_close_matches(last, list(tails), n=n, cutoff=0.7):
            if tails[tail] not in close:
                close.append(tails[tail])
    return close[:n]


def field(path: str) -> Field:
    return BY_PATH[path]


def kind(path: str) -> Optional[type]:
    """The type a `--config.<path>=v` override is parsed to (None: not a schema field)."""
    f = BY_PATH.get(path)
    return f.kind if f is not None else None


# ---------------------------------------------------------------------------------------------
# The default ConfigDict
# ---------------------------------------------------------------------------------------------
def _default_value(f: Field) -> Any:
    if f.default is None:
        return placeholder(f.kind)
    if f.kind is dict:
        return ml_collections.ConfigDict(dict(f.default))
    return f.default


def default_config() -> ml_collections.ConfigDict:
    """Every field with in_defaults, at its default; position = the learned table."""
    config = ml_collections.ConfigDict()
    for name in TOP_LEVEL:
        if name == "position":
            config.position = ml_collections.ConfigDict({"name": DEFAULT_POSITION})
        elif name in SECTIONS:
            config[name] = ml_collections.ConfigDict()
    for f in FIELDS:
        if not f.in_defaults:
            continue
        node = config[f.section] if f.section else config
        node[f.key] = _default_value(f)
    return config


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
def _lookup(config: Any, path: str) -> tuple[bool, Any]:
    node = config
    for part in path.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError, AttributeError, IndexError):
            return False, None
    return True, node


def value(config: Any, path: str) -> Any:
    """config's `path`, or the field's default where the config lacks it."""
    present, v = _lookup(config, path)
    return v if present else BY_PATH[path].default


def given(config: Any, path: str) -> Any:
    """What the config itself sets at `path`, None where it sets nothing: for fingerprints
    (cache keys) that must not change when a default is declared, never for behaviour."""
    return _lookup(config, path)[1]


def check_value(path: str, v: Any) -> Any:
    """`v` if the field's check accepts it; else ConfigError naming the field, v and what is
    allowed."""
    f = BY_PATH[path]
    if not f.ok(v):
        raise ConfigError(path, v, f.allowed)
    return v


def checked(config: Any, path: str) -> Any:
    """`value(config, path)`, checked (check_value)."""
    return check_value(path, value(config, path))


def check_warmup(train: Any) -> tuple[int, int]:
    """(train.steps, train.warmup_steps) of the train section `train`, each checked, and the
    warm-up shorter than the run."""
    steps = check_value("train.steps", train["steps"])
    warmup = check_value("train.warmup_steps", train["warmup_steps"])
    if warmup >= steps:
        raise ConfigError("train.warmup_steps", warmup, f"an int in [0, train.steps={steps})")
    return steps, warmup


def check_all(config: Any, sections: tuple = TOP_LEVEL) -> None:
    """Every declared field of `sections`, in the table's order."""
    for f in FIELDS:
        if (f.section or f.path) in sections:
            checked(config, f.path)


# ---------------------------------------------------------------------------------------------
# The read-only view
# ---------------------------------------------------------------------------------------------
def _plain(node: Any) -> Any:
    if hasattr(node, "to_dict"):
        return node.to_dict()
    if hasattr(node, "items"):
        return {k: _plain(v) for k, v in node.items()}
    return node


def completed(config: Any) -> dict:
    """A plain dict of `config` with every schema field present: the defaults of the fields
    it lacks (an older saved config, a config file that leaves an optional field out). The one
    place that fills them."""
    out = dict(_plain(config)) if config is not None else {}
    for f in FIELDS:
        if f.section:
            section = out.get(f.section)
            if section is None:
                section = out[f.section] = {}
            elif not isinstance(section, dict):
                continue
        else:
            section = out
        if f.key not in section:
            section[f.key] = dict(f.default) if isinstance(f.default, dict) else f.default
    out.setdefault("position", {"name": DEFAULT_POSITION})
    return out


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return View(value)
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


class View(Mapping):
    """A read-only config: fields by attribute (`v.train.steps`) or key, sections are Views,
    lists are tuples. Made by `view`; setting anything raises."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict):
        object.__setattr__(self, "_fields", {k: _frozen(v) for k, v in fields.items()})

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(f"config has no field {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the config view is read-only (setting {name!r})")

    def __getitem__(self, name: str) -> Any:
        return self._fields[name]

    def __iter__(self):
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"View({self.to_dict()!r})"

    def to_dict(self) -> dict:
        return {k: v.to_dict() if isinstance(v, View) else v for k, v in self._fields.items()}


def section_view(node: Any, section: str) -> View:
    """The view of one section (`config.train`, `config.mesh`; None = all defaults), for code
    handed a section rather than the whole config."""
    if isinstance(node, View) and all(k in node for k in KNOWN[section]):
        return node
    return view({section: node if node is not None else {}})[section]


def view(config: Any) -> View:
    """The read-only view of `config` that code reads by attribute (`v.train.eval_every`):
    every schema field present (defaults filled by `completed`), nothing settable. A view
    passes through unchanged. Code takes it where it reads, since the entry points still fill
    fields after validation (model.vocab_size from the tokenizer)."""
    if isinstance(config, View):
        return config
    return View(completed(config))
