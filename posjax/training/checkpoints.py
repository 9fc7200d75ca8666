"""Orbax checkpoints: train state + data-iterator state, saved together, atomically.

Layout: <workdir>/checkpoints/<step>/{state,data}. orbax writes each step into a temporary
directory and renames it when complete, so a crash mid-save never leaves a half checkpoint
that `latest_step()` would pick up. Saves are asynchronous (training continues while the
arrays are written); `wait()` blocks until the last one is on disk.

The data item is the JSON state of the training iterator after the batches of that step, so a
resumed run continues with the next batch an uninterrupted run would have seen.
"""

from __future__ import annotations

import base64
import logging
import os
import sys
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp

from posjax import storage
from posjax.errors import ConfigError

CHECKPOINT_DIR = "checkpoints"
log = logging.getLogger(__name__)


def checkpoint_dir(workdir: str) -> str:
    return storage.join(workdir, CHECKPOINT_DIR)


def latest_step(workdir: str) -> Optional[int]:
    """Latest COMPLETE checkpoint step in workdir, or None; never creates anything."""
    directory = checkpoint_dir(workdir)
    if not storage.isdir(directory):
        return None
    steps = ocp.utils.checkpoint_steps(storage.path(directory))
    return max(steps) if steps else None


def _encode(data_state: Any) -> Any:
    """JSON-safe form of an iterator state (grain may return bytes)."""
    if isinstance(data_state, (bytes, bytearray)):
        return {"__bytes__": base64.b64encode(bytes(data_state)).decode("ascii")}
    return data_state


def _decode(data_state: Any) -> Any:
    if isinstance(data_state, dict) and set(data_state) == {"__bytes__"}:
        return base64.b64decode(data_state["__bytes__"])
    return data_state


# Leaves that schemes kept as parameters before schemes were bound to their model dims: the
# constants ALiBi (`slopes`) and Sandwich (`head_scales`, `inv_freq`) now compute from the dims,
# and NEZHA's empty [0, D] `depth` marker (saved as None: orbax refuses zero-size arrays) is
# gone. A checkpoint written then still holds them (in params and optimizer state), always
# inside a HookParams `tree`; `restore` reads past them.
OBSOLETE_SCHEME_LEAVES = ("slopes", "head_scales", "inv_freq", "depth")


def _key_name(key) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _paths(tree) -> dict:
    """{('params', 'encoder', ...): leaf}: key paths as strings (orbax gives dict keys as
    strings, nnx pure dicts use ints for layer lists)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {tuple(_key_name(k) for k in path): leaf for path, leaf in flat}


def _obsolete(path: tuple) -> bool:
    return len(path) >= 2 and path[-2] == "tree" and path[-1] in OBSOLETE_SCHEME_LEAVES


def _widen(abstract, saved_metadata):
    """(target with the saved tree's structure, paths of the obsolete arrays) when the saved
    tree is `abstract` plus obsolete scheme leaves; (None, []) otherwise (restore as usual)."""
    wanted = _paths(abstract)
    saved_flat, saved_def = jax.tree_util.tree_flatten_with_path(
        saved_metadata, is_leaf=lambda x: x is None)  # NEZHA's dropped marker is a None entry
    saved = [tuple(_key_name(k) for k in path) for path, _ in saved_flat]
    missing = [p for p in saved if p not in wanted]
    # None entries are empty nodes (optax's EmptyState, NEZHA's dropped marker): nothing to read.
    arrays = [p for p, (_, m) in zip(saved, saved_flat) if p not in wanted and m is not None]
    if (not any(_obsolete(p) for p in missing) or not all(_obsolete(p) for p in arrays)
            or set(wanted) - set(saved)):
        return None, []
    # The obsolete leaves are read (orbax restores whole trees) with a replicated sharding,
    # that of a scalar of the state (the step counter), and dropped right after.
    scalar = next((a for a in wanted.values() if not a.shape), None)
    replicated = getattr(scalar, "sharding", None) or jax.sharding.SingleDeviceSharding(
        jax.devices()[0])
    leaves = [wanted[p] if p in wanted else None if m is None else
              jax.ShapeDtypeStruct(tuple(m.shape), m.dtype, sharding=replicated)
              for p, (_, m) in zip(saved, saved_flat)]
    return jax.tree_util.tree_unflatten(saved_def, leaves), arrays


def _check_same_tree(abstract, saved_metadata, path: str) -> None:
    """ConfigError when the checkpoint holds arrays this model does not have: a tree written by
    another posjax version (or another model) is readable and must not be set aside as damaged.
    Arrays that are only absent are left to orbax: damaged array files read the same way."""
    wanted = set(_paths(abstract))
    saved_flat, _ = jax.tree_util.tree_flatten_with_path(saved_metadata,
                                                         is_leaf=lambda x: x is None)
    extra = sorted({tuple(_key_name(k) for k in p) for p, m in saved_flat if m is not None}
                   - wanted)
    if extra:
        raise ConfigError(
            "checkpoint", path,
            f"a checkpoint of this model and posjax version ({len(extra)} saved arrays this "
            f"model does not have, e.g. {'/'.join(extra[0])}); restore it with the posjax "
            "version that wrote it, or start a new workdir")


class _QuietOrbax(logging.Filter):
    """Drops the ERROR records (each with a full traceback) that orbax's background save
    threads log when a save fails, and the WARNINGs about the half-written step around them:
    posjax reports every failed save (`Checkpointer._failed`) and unusable checkpoint
    (posjax.training.integrity) itself, as one warning line, and the tracebacks beside it read
    like a crash. Also the asyncio / concurrent.futures records of orbax's event loops torn
    down by the same failure. INFO records are untouched (train.py hides them anyway)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        if _ORBAX in record.pathname:
            return False
        if record.levelno < logging.ERROR:
            return True
        tb = record.exc_info[2] if record.exc_info else None
        while tb is not None:
            if _ORBAX in tb.tb_frame.f_code.co_filename:
                return False
            tb = tb.tb_next
        return record.name not in ("asyncio", "concurrent.futures") or "loop is closed" not in (
            record.getMessage() + str(record.exc_info[1] if record.exc_info else ""))


_ORBAX = f"{os.sep}orbax{os.sep}"
_QUIET = _QuietOrbax()


def _from_orbax(unraisable) -> bool:
    """An 'unraisable' exception (printed by Python as a bare traceback) that orbax's failed
    save or restore left behind: tensorstore completing a write for an event loop orbax
    already closed, or an orbax coroutine dropped with its error."""
    exc, tb = unraisable.exc_value, unraisable.exc_traceback
    code = getattr(unraisable.object, "cr_code", None)
    if code is not None and _ORBAX in code.co_filename:
        return True
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    if any(_ORBAX in f.co_filename for f in frames):
        return True
    return (isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed"
            and bool(frames) and frames[0].co_name == "call_soon_threadsafe")


def quiet_orbax_errors() -> None:
    """Install _QuietOrbax on the loggers orbax's failures reach, and an unraisable-exception
    hook that drops the leftovers of orbax's failed saves (idempotent)."""
    for name in ("absl", "asyncio", "concurrent.futures"):
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)
    previous = sys.unraisablehook
    if getattr(previous, "_posjax", False):
        return

    def hook(unraisable):
        if not _from_orbax(unraisable):
            previous(unraisable)

    hook._posjax = True
    sys.unraisablehook = hook


class CheckpointFailed(RuntimeError):
    """The final checkpoint of a run could not be written (train.py: exit 1, one line)."""


class Checkpointer:
    """Thin wrapper over ocp.CheckpointManager with the two items posjax saves."""

    def __init__(self, workdir: str, *, every: int, keep: int, async_save: bool = True):
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep,
            save_interval_steps=every,
            enable_async_checkpointing=async_save,
            create=True,
        )
        self.directory = checkpoint_dir(workdir)
        quiet_orbax_errors()
        self.manager = ocp.CheckpointManager(
            storage.path(self.directory), options=options, item_names=("state", "data"))
        # A failed save's background errors can surface in several later calls (wait(),
        # close()); the failure is reported once, and again only after a new save starts.
        self._failure_reported = False

    def latest_step(self) -> Optional[int]:
        return self.manager.latest_step()

    def save(self, step: int, state: Any, data_state: Any, *, force: bool = False) -> bool:
        """Save if `step` is due (or force). Returns whether a save was started.

        A save that fails (disk full, directory deleted under the job, a storage hiccup) is
        reported as one warning line and training goes on: the previous checkpoint is still
        there (orbax only renames complete ones into place). `wait()` says whether the last
        save made it to disk.
        """
        self.wait()  # surfaces a failure of the save still in flight, as a warning
        if not storage.isdir(self.directory):
            # Deleted under a running job (a cleanup script, a user): orbax recreates it, but
            # every earlier checkpoint is gone, and the user should hear about it.
            _warn(f"checkpoint directory {self.directory} disappeared during the run; recreating "
                  "it (earlier checkpoints are lost)")
        self._failure_reported = False
        try:
            return self.manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state),
                    data=ocp.args.JsonSave({"iterator": _encode(data_state)}),
                ),
                force=force,
            )
        except Exception as e:  # noqa: BLE001 - any storage error: report, keep training
            self._failed(step, e)
            return False

    def _failed(self, step: Optional[int], e: BaseException) -> None:
        if self._failure_reported:
            return
        self._failure_reported = True
        reason = (str(e).strip().splitlines() or [""])[0][:200]
        what = f"step {step}" if step is not None else "the last checkpoint"
        self.manager.reload()  # forget what orbax believed it had written
        latest = self.latest_step()
        _warn(f"saving {what} in {self.directory} failed ({type(e).__name__}: {reason}); "
              f"training continues; latest complete checkpoint: "
              + (f"step {latest}" if latest is not None else "none"))

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, Any]:
        """(state placed with the shardings of `abstract_state`, iterator state).

        A checkpoint written before schemes were bound (with OBSOLETE_SCHEME_LEAVES) restores
        too: those leaves are read and dropped, with one warning line.
        """
        saved = self.manager.item_metadata(step)["state"]
        target, obsolete = _widen(abstract_state, saved)
        if target is None:
            _check_same_tree(abstract_state, saved, storage.join(self.directory, str(step)))
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state if target is None else target),
                data=ocp.args.JsonRestore(),
            ),
        )
        state = restored["state"]
        if obsolete:
            _warn(f"checkpoint step {step} holds {len(obsolete)} scheme constants stored as "
                  f"parameters by an older posjax (e.g. {'/'.join(obsolete[0])}); they are "
                  "computed from the model dims now and were dropped")
        if target is not None:  # back to the structure of abstract_state
            by_path = _paths(state)
            leaves = [by_path[p] for p in _paths(abstract_state)]
            state = jax.tree_util.tree_unflatten(jax.tree.structure(abstract_state), leaves)
        return state, _decode(restored["data"]["iterator"])

    def wait(self) -> bool:
        """Block until the save in flight is on disk. False (after a warning) if it failed."""
        try:
            self.manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001
            self._failed(None, e)
            return False
        return True

    def close(self) -> None:
        self.wait()
        try:
            self.manager.close()
        except Exception as e:  # noqa: BLE001
            # A failed save's last background write (orbax's checkpoint-metadata store) can
            # surface here, or in a second wait(), depending on which thread loses the race:
            # the same failure, said once (_failed).
            self._failed(None, e)


def _warn(line: str) -> None:
    """A warning the user must see: one line on stderr, no logging prefix."""
    sys.stderr.write(f"warning: {line}\n")
    sys.stderr.flush()
