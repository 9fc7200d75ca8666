"""Check a value against a declaration of posjax.evaluation.results.record (TypedDicts, unions of
them told apart by `status`, dict[str, X], list[X], Optional, Literal, Any, plain types).

The first missing required field or wrong type is one RecordError naming where it is
(`cells['run@5|as_is{}|L=512|ab'].overall.accuracy_lo`) and which declaration requires it.
Undeclared fields are not errors (a newer writer's file still loads); they are collected in
`extra`, which the round-trip test holds empty for every committed file.
"""

from __future__ import annotations

import functools
import typing
from typing import Any, Literal, Union

from posjax.evaluation.results import record


class RecordError(ValueError):
    """A results record that does not match its declaration (posjax.evaluation.results.record)."""


@functools.lru_cache(maxsize=None)
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _is_record(tp) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _status_of(tp) -> tuple:
    """The `status` literals a record class accepts (() when it has no status field)."""
    hint = _hints(tp).get("status")
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else ()


def _where(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


# Numbers in a list are not checked one by one: per-row sums run to 10^5 entries a cell.
_SCALARS = (int, float, bool, str)


def check(value, tp, path: str = "results", extra: list | None = None) -> None:
    """RecordError unless `value` fits `tp`; undeclared fields' paths go to `extra`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return
    if tp is type(None):
        if value is not None:
            raise RecordError(f"{path}: {value!r} where only null is allowed")
        return
    if origin is Union:
        if value is None and type(None) in args:
            return
        members = [a for a in args if a is not type(None)]
        if all(_is_record(m) and _status_of(m) for m in members) and isinstance(value, dict):
            status = value.get("status")
            for m in members:
                if status in _status_of(m):
                    return check(value, m, path, extra)
            allowed = sorted(s for m in members for s in _status_of(m))
            raise RecordError(f"{path}.status: {status!r}, not one of {allowed}")
        errors = []
        for m in members:  # no discriminator: the first member that fits
            try:
                return check(value, m, path, extra)
            except RecordError as e:
                errors.append(str(e))
        raise RecordError(errors[0] if len(errors) == 1 else
                          f"{path}: fits none of {[getattr(m, '__name__', m) for m in members]}"
                          f" ({'; '.join(errors)})")
    if origin is Literal:
        if value not in args:
            raise RecordError(f"{path}: {value!r}, not one of {list(args)}")
        return
    if _is_record(tp):
        _check_record(value, tp, path, extra)
        return
    if origin is dict:
        if not isinstance(value, dict):
            raise RecordError(f"{path}: {type(value).__name__} where a mapping is declared")
        for k, v in value.items():
            check(v, args[1], _where(path, str(k)), extra)
        return
    if origin is list:
        if not isinstance(value, list):
            raise RecordError(f"{path}: {type(value).__name__} where a list is declared")
        if args and args[0] not in _SCALARS:
            for i, v in enumerate(value):
                check(v, args[0], f"{path}[{i}]", extra)
        return
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, tp)
    if not ok:
        raise RecordError(f"{path}: {value!r} is not {tp.__name__}")


def _check_record(value, cls, path: str, extra: list | None) -> None:
    if not isinstance(value, dict):
        raise RecordError(f"{path}: {type(value).__name__} where a {cls.__name__} record "
                          "is declared")
    missing = [k for k in sorted(cls.__required_keys__) if k not in value]
    if missing:
        raise RecordError(f"{_where(path, missing[0])}: missing (a required field of "
                          f"{cls.__name__.lstrip('_')}, posjax.evaluation.results.record)")
    hints = _hints(cls)
    for k, v in value.items():
        if k in hints:
            check(v, hints[k], _where(path, k), extra)
        elif extra is not None and cls.__name__ not in record.OPEN:
            extra.append(_where(path, k))
