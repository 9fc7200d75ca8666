"""A study's source checkpoint kept beside its results, so the study can go on elsewhere.

A long study (continued training from one trained source, run over several sessions on
machines that do not keep their workdirs) needs every curve to start from the SAME weights.
Retraining the source reproduces it only up to floating-point rounding across machines, and
the weights digest in results.json (restore.weights_digest) then refuses to mix the two. So
the source's params are written once, next to results.json, as one safetensors file (params
only, float32: the optimizer moments are not needed to evaluate or continue from it) with the
digest of the weights and their step in its metadata; a later run rebuilds the checkpoint at
that step from it instead of training again.
"""

from __future__ import annotations

import os

import jax
import numpy as np
import safetensors.numpy

from posjax import storage
from posjax.convert import store
from posjax.errors import ConfigError
from posjax.evaluation.run import restore
from posjax.training import checkpoints

SEPARATOR = "/"


def _flat(params: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in params.items():
        name = f"{prefix}{SEPARATOR}{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(_flat(value, name))
        else:
            out[name] = np.ascontiguousarray(np.asarray(value))
    return out


def _nested(flat: dict) -> dict:
    out: dict = {}
    for name, value in flat.items():
        *parents, leaf = name.split(SEPARATOR)
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def export(workdir: str, path: str) -> str:
    """Write the params of `workdir`'s latest checkpoint to `path` (atomically; kept if there).
    Returns the weights' digest."""
    if os.path.exists(path):
        return _metadata(path)[1]
    run = restore.open_run(workdir)
    digest = restore.weights_digest(run)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    safetensors.numpy.save_file(_flat(restore.load_params(run)), tmp,
                                metadata={"sha256": digest, "step": str(run.step)})
    os.replace(tmp, path)
    return digest


def _metadata(path: str) -> tuple[int, str]:
    """(step, digest) from an archive's header (no tensor is read)."""
    with safetensors.safe_open(path, framework="numpy") as f:
        meta = f.metadata() or {}
    if "sha256" not in meta or "step" not in meta:
        raise ConfigError("source archive", path, "a file written by source_archive.export "
                          "(its metadata names the weights' sha256 and step)")
    return int(meta["step"]), meta["sha256"]


def read(path: str) -> tuple[dict, int, str]:
    """(params, step, digest) of an archive written by `export`."""
    step, digest = _metadata(path)
    return _nested(safetensors.numpy.load_file(path)), step, digest


def step_of(path: str) -> int:
    return _metadata(path)[0]


def restore_into(workdir: str, path: str) -> int:
    """Add the archive's checkpoint to `workdir` (a posjax workdir whose config.json and vocab
    describe the same model) at the archive's step, and check that the weights read back are
    the archived ones. Returns the step."""
    params, step, digest = read(path)
    config = store.read_config(workdir)
    ckpt = checkpoints.Checkpointer(workdir, every=1, keep=int(config.train.keep_checkpoints),
                                    async_save=False)
    try:
        state = store.train_state(config, jax.tree.map(np.asarray, params))
        state["step"] = jax.numpy.asarray(step, jax.numpy.int32)
        ckpt.save(step, state, dict(store.FRESH_ITERATOR_STATE), force=True)
    finally:
        ckpt.close()
    got = restore.weights_digest(restore.open_run(storage.join(workdir), step=step))
    if got != digest:
        raise ConfigError("source archive", path, f"weights whose digest is the one it "
                          f"records ({digest[:12]}; read back {got[:12]})")
    return step
