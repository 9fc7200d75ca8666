"""Checkpoint integrity: find the newest checkpoint that is really usable, set bad ones aside.

orbax writes a step into `<step>.orbax-checkpoint-tmp-*` and renames it when complete, so a
crash (or kill -9) mid-save leaves the previous checkpoint untouched and the temporary directory
is ignored. What orbax does NOT catch is damage after the rename: an empty `<step>/` directory
(counted as the latest step), a truncated or missing file (a JSONDecodeError or a TensorStore
error from deep inside orbax), a missing item. This module turns those into one clear line:

- `scan(directory)`: structural check of every step directory (no arrays read). A step with a
  problem is moved to `<workdir>/checkpoints.corrupt/<step>-<time>/` (never deleted: it may be
  someone's only copy) and a warning names the problem, so orbax neither resumes from it nor
  trips over the step number when training reaches it again.
- `restore_latest(ckpt, abstract_state)`: restore the newest step; if reading it fails anyway,
  set it aside the same way and fall back to the one before. If no step is usable,
  `ConfigError('checkpoint', <path>, ...)` names the directory: posjax never silently restarts
  from step 0 over a run that had checkpoints.

Not detected: bytes overwritten inside an array file that keep its size (orbax/TensorStore keep
no checksums of array data); such a checkpoint restores wrong numbers.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Optional

import orbax.checkpoint as ocp

from posjax import storage
from posjax.errors import ConfigError

log = logging.getLogger(__name__)

CORRUPT_DIR = "checkpoints.corrupt"
ITEMS = ("state", "data")


def _json(path: str) -> Optional[str]:
    """None if `path` holds valid JSON, else what is wrong with it."""
    name = storage.path(path).name
    if not storage.isfile(path):
        return f"{name} is missing"
    try:
        json.loads(storage.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return f"{name} is unreadable ({type(e).__name__}: {str(e)[:80]})"
    return None


def problems(step_dir: str) -> list[str]:
    """What is structurally wrong with a committed step directory ([] = looks complete)."""
    if not storage.isdir(step_dir):
        return ["not a directory"]
    if not storage.listdir(step_dir):
        return ["the directory is empty"]
    found = []
    for item in ITEMS:
        if not storage.isdir(storage.join(step_dir, item)):
            found.append(f"item '{item}' is missing")
    if found:
        return found
    for rel in ("_CHECKPOINT_METADATA", "data/metadata", "state/_METADATA"):
        p = _json(storage.join(step_dir, rel))
        if p:
            found.append(p if "/" not in rel else f"{rel.split('/')[0]}/{p}")
    if not storage.isfile(storage.join(step_dir, "state", "manifest.ocdbt")):
        found.append("state/manifest.ocdbt is missing")
    base = len(storage.join(step_dir))  # walk_files gives full (absolute) paths
    for path in storage.walk_files(storage.join(step_dir, "state")):
        if storage.size(path) == 0:
            found.append(f"{path[base:].lstrip('/')} is empty (truncated)")
    return found


def step_dirs(directory: str) -> list[tuple[int, str]]:
    """(step, path) of every committed step directory, newest first: orbax's own test of
    'committed' (local: renamed into place; object stores: its commit_success file), so a
    save in progress is never looked at."""
    if not storage.isdir(directory):
        return []
    steps = ocp.utils.checkpoint_steps(storage.path(directory))
    return sorted(((s, storage.join(directory, str(s))) for s in steps), reverse=True)


def set_aside(step_dir: str, reason: str, write: Callable[[str], None] = log.warning) -> str:
    """Move a bad step directory to <workdir>/checkpoints.corrupt/<step>-<unix time>/."""
    step = storage.path(step_dir)
    target_root = step.parent.parent / CORRUPT_DIR
    storage.makedirs(target_root)
    target = str(target_root / f"{step.name}-{int(time.time())}")
    suffix = 0
    while storage.exists(target + (f".{suffix}" if suffix else "")):
        suffix += 1
    target += f".{suffix}" if suffix else ""
    storage.move(step_dir, target)
    write(f"checkpoint {step_dir} is unusable ({reason}); moved to {target}")
    return target


def scan(directory: str, write: Callable[[str], None] = log.warning) -> Optional[int]:
    """Set aside structurally broken step directories; the newest remaining step, or None."""
    good = None
    for step, path in step_dirs(directory):
        found = problems(path)
        if found:
            set_aside(path, "; ".join(found[:3]), write)
        elif good is None:
            good = step
    return good


def restore_latest(ckpt, abstract_state: Any, write: Callable[[str], None] = log.warning, *,
                   move: bool = True, fallback: bool = True):
    """(state, data_state, step) from the newest usable checkpoint, or None if there is none.

    `ckpt` is a posjax.training.checkpoints.Checkpointer. Broken steps are set aside (only where
    `move`: process 0 of a multi-process run). Without `fallback` (multi-process: every process
    must restore the same step) a step that fails to restore is an error, not skipped. Raises
    ConfigError naming the checkpoint directory when no step could be restored.
    """
    had_any = bool(step_dirs(ckpt.directory))
    if move:
        scan(ckpt.directory, write)
        ckpt.manager.reload()
    for step, path in step_dirs(ckpt.directory):
        try:
            state, data_state = ckpt.restore(step, abstract_state)
        except ConfigError:  # readable, but not this model's tree: never set it aside
            raise
        except Exception as e:  # orbax / TensorStore raise many types; all mean "unreadable"
            first = (str(e).strip().splitlines() or [""])[0][:160]
            reason = f"{type(e).__name__}: {first}"
            if not fallback:
                raise ConfigError("checkpoint", path, f"a readable checkpoint ({reason})") from None
            if move:
                set_aside(path, reason, write)
                ckpt.manager.reload()
            continue
        return state, data_state, step
    if had_any:
        raise ConfigError(
            "checkpoint", ckpt.directory,
            "a directory holding at least one complete checkpoint; every step there was "
            f"unusable and was moved to {storage.path(ckpt.directory).parent / CORRUPT_DIR} "
            "(run again to start from step 0, or restore a good copy)")
    return None
