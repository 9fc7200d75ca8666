"""Read a training workdir for evaluation: config.json, vocab.txt and the PARAMS of a checkpoint.

Only the `params` item of the saved train state is read (orbax partial restore): the optimizer
moments, twice the size of the model, never leave the disk. Nothing is written to the workdir.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Optional

import jax
import numpy as np
import ml_collections
import orbax.checkpoint as ocp

from posjax import schema, storage
from posjax.data import tokenizers
from posjax.errors import ConfigError
from posjax.training import checkpoints
from posjax.training import workdir as workdir_lib
from posjax.training.workdir import CONFIG_FILE

VOCAB_FILE = "vocab.txt"


@dataclasses.dataclass
class Run:
    """One trained model as the evaluator sees it."""

    name: str  # short label for tables and plots
    workdir: str  # absolute path
    step: int  # checkpoint step whose params are used
    config: ml_collections.ConfigDict  # the training config (model.vocab_size filled)
    tokenizer: Any
    params: Any = None  # pure dict, loaded lazily by `load_params`

    @property
    def key(self) -> str:
        """Identity of the weights in result keys: the workdir and the checkpoint step."""
        return f"{self.workdir}@{self.step}"

    @property
    def trained_length(self) -> int:
        return int(self.config.data.seq_len)

    @property
    def scheme(self) -> str:
        return str(self.config.position.name)


def read_config(workdir: str) -> ml_collections.ConfigDict:
    return workdir_lib.read_config(
        workdir, allowed=f"a training workdir holding {CONFIG_FILE} (written by train.py)")


def open_run(workdir: str, name: Optional[str] = None, step: Optional[int] = None) -> Run:
    """Config, tokenizer and checkpoint step of `workdir`; ConfigError if any is missing."""
    storage.check_filesystem(workdir)
    workdir = storage.join(workdir)
    if not storage.isdir(workdir):
        raise ConfigError("workdir", workdir, "an existing training workdir (no such directory)")
    config = read_config(workdir)
    latest = checkpoints.latest_step(workdir)
    if latest is None:
        raise ConfigError("workdir", workdir,
                          "a workdir with a finished checkpoint (checkpoints/<step>/ is missing)")
    step = latest if step is None else step
    vocab = storage.join(workdir, VOCAB_FILE)
    if not storage.isfile(vocab):
        raise ConfigError("workdir", workdir, f"a workdir holding the run's {VOCAB_FILE}")
    tokenizer = tokenizers.load(schema.view(config).data.tokenizer, vocab)
    if schema.view(config).model.vocab_size is None:
        config.model.vocab_size = int(tokenizer.vocab_size)
    tokenizers.check_vocab(tokenizer, int(config.model.vocab_size))
    return Run(name or storage.path(workdir).name, workdir, int(step), config, tokenizer)


def load_params(run: Run) -> Any:
    """The checkpoint's params as a pure dict of arrays on the default device (cached)."""
    if run.params is None:
        path = storage.path(checkpoints.checkpoint_dir(run.workdir)) / str(run.step) / "state"
        ckptr = ocp.PyTreeCheckpointer()
        tree = ckptr.metadata(path).item_metadata.tree
        if "params" not in tree:
            raise ConfigError("workdir", run.workdir, "a checkpoint whose state holds 'params'")
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        item = {"params": jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype),
                                       tree["params"])}
        args = jax.tree.map(lambda _: ocp.ArrayRestoreArgs(sharding=device), item)
        restored = ckptr.restore(
            path, args=ocp.args.PyTreeRestore(item=item, restore_args=args, partial_restore=True))
        run.params = restored["params"]
    return run.params


def weights_digest(run: Run) -> str:
    """sha256 over the checkpoint's params (each leaf's path, dtype, shape and bytes, in path
    order): what a results.json's cells were computed from. The workdir and step alone do not
    say it: a workdir retrained on another machine, or from another source, reuses both."""
    h = hashlib.sha256()
    for path, leaf in sorted(jax.tree_util.tree_flatten_with_path(load_params(run))[0],
                             key=lambda kv: jax.tree_util.keystr(kv[0])):
        a = np.ascontiguousarray(np.asarray(leaf))
        h.update(f"{jax.tree_util.keystr(path)}|{a.dtype}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def unique_names(workdirs: list[str]) -> list[str]:
    """Labels for workdirs: their basenames, with parent folders added until they differ."""
    parts = [storage.join(w).rstrip("/").split("/") for w in workdirs]
    depth = 1
    while depth < max(len(p) for p in parts):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return names
        depth += 1
    return ["/".join(p) for p in parts]


def conform(abstract: Any, restored: Any) -> Any:
    """`restored` (orbax gives dict keys as strings) rebuilt with the key types and order of
    `abstract` (nnx pure dicts use int keys for layer lists: '10' < '2' but 2 < 10).
    Raises KeyError naming the first missing path."""
    if isinstance(abstract, dict):
        if not isinstance(restored, dict):
            raise KeyError("checkpoint has a leaf where the model has a subtree")
        out = {}
        for key, sub in abstract.items():
            name = str(key)
            if name not in restored and key not in restored:
                raise KeyError(name)
            out[key] = conform(sub, restored[key] if key in restored else restored[name])
        return out
    return restored
