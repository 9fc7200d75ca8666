"""Store a converted model as a posjax training workdir, and read a workdir's params back.

Layout (the one train.py and eval.py use, see posjax/training/workdir.py and checkpoints.py):
  config.json                  the full posjax config (model, position, data, train, mesh)
  vocab.txt                    posjax-ordered WordPiece vocabulary (when the model had one)
  convert.json                 provenance: HF dir, model type, HF id order, notes
  checkpoints/0/{state,data}   a step-0 train state: the converted params, a fresh LAMB state
                               for config.train, step 0, the trainer's rng, and the data state of
                               a fresh training iterator
so `python train.py --config=configs/workdir.py:DIR --workdir=DIR` continues
training from the converted weights, and eval.py reads the params like any run's.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from posjax import schema, storage
from posjax.errors import ConfigError
from posjax.models import build_model
from posjax.training import checkpoints
from posjax.training import workdir as workdir_lib
from posjax.training.optimizer import make_optimizer

CONVERT_FILE = "convert.json"
VOCAB_FILE = "vocab.txt"
# grain's state for a training iterator that has produced nothing yet (what
# posjax.data.get_iterator_state returns on a fresh iterator; checked in tests/convert).
FRESH_ITERATOR_STATE = {"next_index": 0}


def check_empty(out: str) -> None:
    """posjax never overwrites: the output must be missing or an empty directory."""
    if storage.isfile(out) or storage.listdir(out):
        raise ConfigError("--out", out, "a new or empty directory (posjax never overwrites files)")


def train_state(config, params: dict) -> dict:
    """The trainer's state dict for step 0 around `params` (see posjax/training/state.py)."""
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
    tx, _ = make_optimizer(config.train, params, _logical_specs(config), config.position)
    _, train_key = jax.random.split(jax.random.PRNGKey(int(schema.view(config).seed)))
    return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32),
            "rng": train_key, "skipped": jnp.zeros((), jnp.int32)}


def _logical_specs(config) -> Any:
    with nnx.use_eager_sharding(False):
        model = nnx.eval_shape(lambda: build_model(config, nnx.Rngs(0)))
    return nnx.to_pure_dict(nnx.get_partition_spec(nnx.state(model, nnx.Param)))


def write(out: str, config, params: dict, *, vocab: Optional[list], metadata: dict) -> str:
    """Write the workdir; returns its absolute path."""
    storage.check_filesystem(out, "--out")
    out = storage.join(out)
    check_empty(out)
    storage.makedirs(out)
    workdir_lib.save_config(config, out)  # first: marks the directory as a posjax workdir
    if vocab is not None:
        storage.write_text(storage.join(out, VOCAB_FILE), "\n".join(vocab) + "\n")
    storage.write_text(storage.join(out, CONVERT_FILE), json.dumps(metadata, indent=1) + "\n")
    ckpt = checkpoints.Checkpointer(out, every=1, keep=int(config.train.keep_checkpoints),
                                    async_save=False)
    try:
        ckpt.save(0, train_state(config, params), dict(FRESH_ITERATOR_STATE), force=True)
    finally:
        ckpt.close()
    return out


def read_config(workdir: str):
    """A workdir's config (posjax.training.workdir.read_config, with load()'s error wording)."""
    return workdir_lib.read_config(workdir, field="path", allowed=(
        f"a posjax workdir (with {workdir_lib.CONFIG_FILE}) or a Hugging Face model directory "
        "(config.json with model_type)"))


def read_metadata(workdir: str) -> dict:
    path = storage.join(workdir, CONVERT_FILE)
    if not storage.isfile(path):
        return {}
    return json.loads(storage.read_text(path))


def read_params(workdir: str, target: dict) -> dict:
    """The latest checkpoint's params (only that item is read), in `target`'s key order/types."""
    step = checkpoints.latest_step(workdir)
    if step is None:
        raise ConfigError("path", workdir, "a workdir with a finished checkpoint "
                          "(checkpoints/<step>/ is missing)")
    path = storage.path(checkpoints.checkpoint_dir(workdir)) / str(step) / "state"
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    # The item's own handler: a Checkpointer would look for step-level metadata inside the item
    # directory and log a WARNING on every load.
    handler = ocp.PyTreeCheckpointHandler()
    try:
        tree = handler.metadata(path).tree
        item = {"params": jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype),
                                       tree["params"])}
        args = jax.tree.map(lambda _: ocp.ArrayRestoreArgs(sharding=device), item)
        restored = handler.restore(path, args=ocp.args.PyTreeRestore(
            item=item, restore_args=args, partial_restore=True))
    finally:
        handler.close()
    return _conform(target, restored["params"])


def _conform(target: Any, restored: Any) -> Any:
    """orbax returns dict keys as strings; rebuild with the target's keys (ints for layers)."""
    if isinstance(target, dict):
        out = {}
        for key, sub in target.items():
            got = restored.get(key, restored.get(str(key))) if isinstance(restored, dict) else None
            if got is None:
                raise ConfigError("checkpoint param", str(key), "present (the checkpoint does not "
                                  "match config.json)")
            out[key] = _conform(sub, got)
        return out
    return np.asarray(restored)
