"""Workdir rules: fresh, resume, or refuse — decided before anything is compiled.

- missing or empty            -> fresh run (the directory is created; the writer lock,
                                 posjax.writer_lock, does not count)
- holds a complete checkpoint -> resume; the saved config.json must agree with this config on
                                 every model / position / tokenizer field (ConfigError names
                                 the first field that differs)
- holds config.json but no checkpoint (a run stopped before its first save) -> start again at
                                 step 0 if the fields agree, same check
- anything else non-empty     -> ConfigError: posjax never overwrites files it did not write
- not writable                -> ConfigError
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any, Optional

import ml_collections

from posjax import storage, writer_lock
from posjax.errors import ConfigError
from posjax.training import checkpoints

CONFIG_FILE = "config.json"

# Fields that define the network and its inputs: changing them makes a checkpoint meaningless.
# Training hyper-parameters (steps, learning rate, ...) may change between invocations.
PINNED_PREFIXES = ("model.", "position.")
PINNED_FIELDS = ("data.tokenizer", "data.vocab_size")


def _flatten(d: Any, prefix: str = "") -> dict:
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = d
    return out


def config_dict(config) -> dict:
    """Plain JSON-able dict of a ConfigDict (what config.json holds)."""
    return json.loads(config.to_json_best_effort())


def pinned(flat: dict) -> dict:
    return {k: v for k, v in flat.items()
            if k.startswith(PINNED_PREFIXES) or k in PINNED_FIELDS}


def compare_configs(saved: dict, current: dict, where: str) -> None:
    """ConfigError naming the first pinned field whose value differs.

    A field left None in one of them (e.g. model.vocab_size before the tokenizer filled it)
    is not a mismatch.
    """
    a, b = pinned(_flatten(saved)), pinned(_flatten(current))
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if va is None or vb is None:
            continue
        if isinstance(va, list):
            va = list(va)
        if isinstance(vb, (list, tuple)):
            vb = list(vb)
        if va != vb:
            raise ConfigError(
                key, vb,
                f"{va!r}, the value the run in {where} was started with (resuming cannot change "
                "model, position or tokenizer fields; use a new --workdir)")


def _check_writable(workdir: str) -> None:
    """Create the workdir and write (then delete) a probe file in it: a read-only disk, a
    bucket without write permission or a path under a file fails here, before any work."""
    parent = storage.path(workdir)
    while not parent.exists() and parent.parent != parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise ConfigError("workdir", workdir, f"a directory ({parent} is a file)")
    probe = storage.join(workdir, f".write_probe_{uuid.uuid4().hex[:12]}")
    try:
        storage.makedirs(workdir)
        storage.write_bytes(probe, b"")
        storage.remove(probe)
    except OSError as e:
        raise ConfigError("workdir", workdir,
                          f"a writable directory ({e.strerror or type(e).__name__})") from None


def apply_rules(config, workdir: str) -> Optional[int]:
    """Apply the workdir rules. Returns the checkpoint step to resume from, or None."""
    storage.check_filesystem(workdir)
    workdir = os.fspath(storage.path(workdir))
    if storage.isfile(workdir):
        raise ConfigError("workdir", workdir, "a directory (it is a file)")
    existed = bool(writer_lock.entries(workdir))  # the run's own writer lock does not count
    _check_writable(workdir)
    if not existed:
        return None
    step = checkpoints.latest_step(workdir)
    if storage.exists(storage.join(workdir, CONFIG_FILE)):
        compare_configs(read_config_dict(workdir), config_dict(config), workdir)
        return step
    raise ConfigError(
        "workdir", workdir,
        "an empty directory or one written by posjax train.py (it holds files but no "
        f"{CONFIG_FILE}; nothing there is overwritten)")


# Keys that older posjax versions wrote into config.json and that no longer exist, with the one
# value they could hold then: dropped on read, so those workdirs keep loading.
RETIRED_KEYS = {("model", "attention_dropout"): (0, 0.0, None)}


def read_config_dict(workdir: str, *, field: str = "workdir",
                     allowed: str = f"a posjax workdir holding {CONFIG_FILE}") -> dict:
    """The plain dict in <workdir>/config.json (the one reader of a workdir's config).

    A missing or unreadable file is a ConfigError on `field` (callers name the flag the user
    gave); keys older versions wrote (RETIRED_KEYS) are dropped.
    """
    path = storage.join(workdir, CONFIG_FILE)
    if not storage.isfile(path):
        raise ConfigError(field, workdir, allowed)
    try:
        saved = json.loads(storage.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError) as e:  # truncated or overwritten (JSONDecodeError, UnicodeDecodeError)
        raise ConfigError("config.json", path, "the JSON file train.py wrote (it is damaged: "
                          f"{type(e).__name__}: {str(e)[:80]}); restore it from a copy or start "
                          "a new workdir") from None
    if not isinstance(saved, dict):
        raise ConfigError(path, type(saved).__name__, "a JSON object (a posjax config)")
    for (section, key), values in RETIRED_KEYS.items():
        block = saved.get(section)
        if isinstance(block, dict) and key in block and block[key] in values:
            del block[key]
    return saved


def read_config(workdir: str, **kwargs):
    """<workdir>/config.json as an ml_collections.ConfigDict (see read_config_dict)."""
    return ml_collections.ConfigDict(read_config_dict(workdir, **kwargs))


def save_config(config, workdir: str) -> None:
    """Write config.json atomically (posjax.storage.write_text)."""
    storage.write_text(storage.join(workdir, CONFIG_FILE),
                       config.to_json_best_effort(indent=2, sort_keys=True) + "\n")
