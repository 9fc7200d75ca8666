"""Continued training of a learned-table model under 'hierarchical' at a longer length.

The source workdir is only read. A NEW workdir gets:
  * vocab.txt copied from the source (same token ids),
  * config.json: the source config with position = hierarchical(rows = min(T, table rows),
    alpha), data.seq_len = L, model.max_length = L, data.batch_size scaled so a step holds
    about as many tokens as before, train.steps = N (fresh warmup and schedule),
  * a step-0 checkpoint whose params are the source params (table cut to `rows`) and whose
    optimizer state is fresh,
then posjax.training.train_and_evaluate resumes from that step 0 and trains N steps. Running
it again with a finished target workdir does nothing (the loop sees step N >= train.steps).
"""

from __future__ import annotations

import os
import shutil

import ml_collections

from posjax.errors import ConfigError
from posjax.evaluation import methods
from posjax.evaluation.restore import VOCAB_FILE, Run, conform, load_params


def continued_config(run: Run, length: int, steps: int, alpha: float) -> ml_collections.ConfigDict:
    if run.scheme not in methods.LEARNED:
        raise ConfigError("continue_steps", steps,
                          f"continued training extends a learned table with 'hierarchical'; "
                          f"{run.workdir} uses position '{run.scheme}'")
    T = run.trained_length
    rows = min(T, methods._table_rows(run.config))
    if not isinstance(length, int) or not rows < length <= rows * rows:
        raise ConfigError("continue_length", length,
                          f"an int in ({rows}, {rows * rows}] (the trained table has {rows} rows)")
    if not isinstance(steps, int) or steps < 1:
        raise ConfigError("continue_steps", steps, "a positive int")
    cfg = ml_collections.ConfigDict(run.config.to_dict())
    cfg.position = ml_collections.ConfigDict({"name": "hierarchical", "rows": rows, "alpha": float(alpha)})
    cfg.model.max_length = int(length)
    cfg.data.seq_len = int(length)
    cfg.data.batch_size = max(1, int(cfg.data.batch_size) * T // length)
    t = cfg.train
    t.steps = int(steps)
    t.warmup_steps = max(1, min(int(t.get("warmup_steps", 0) or 0), steps // 10))
    t.checkpoint_every = int(steps)
    t.eval_every = int(steps)
    t.log_every = max(1, min(int(t.log_every), steps))
    return cfg


def prepare_workdir(run: Run, cfg: ml_collections.ConfigDict, workdir: str) -> None:
    """Create the new workdir with the step-0 checkpoint (no-op if it already has one)."""
    import jax

    from posjax import data as data_lib
    from posjax import models
    from posjax.training import checkpoints, sharding
    from posjax.training import loop
    from posjax.training import workdir as workdir_lib
    from posjax.training import state as state_lib
    from posjax.training.optimizer import make_optimizer

    workdir = os.path.abspath(workdir)
    if workdir == run.workdir:
        raise ConfigError("continue_workdir", workdir, "a directory other than the source workdir")
    if checkpoints.latest_step(workdir) is not None:
        return
    if os.path.isdir(workdir) and os.listdir(workdir):
        raise ConfigError("continue_workdir", workdir,
                          "an empty or new directory (it holds files but no checkpoint)")
    os.makedirs(workdir, exist_ok=True)
    # config.json first (it marks the directory as a posjax workdir), then the source's
    # vocab.txt, which loop.prepare then reuses instead of building a new vocabulary.
    workdir_lib.save_config(cfg, workdir)
    shutil.copyfile(os.path.join(run.workdir, VOCAB_FILE), os.path.join(workdir, VOCAB_FILE))
    _, tokenizer = loop.prepare(cfg, workdir)
    mesh = sharding.make_mesh(cfg.get("mesh", None))
    rules = sharding.logical_rules(cfg.get("mesh", None))
    setup = state_lib.make_setup(cfg, mesh, rules, models.build_model, make_optimizer)
    state = setup.init_fn()
    abstract = jax.tree.map(lambda x: x, state["params"])
    source = load_params(run)
    rows = int(cfg.position.rows)
    if rows < methods._table_rows(run.config):
        source = methods.slice_table(source, rows)
    params = conform(abstract, source)
    methods.check_shapes(abstract, params, "hierarchical", int(cfg.data.seq_len), rows)
    state["params"] = jax.tree.map(
        lambda new, old: jax.device_put(old.astype(new.dtype), new.sharding), abstract, params)
    it = data_lib.make_train_iterator(cfg, tokenizer, int(cfg.get("seed", 0)), workdir=workdir)
    ckpt = checkpoints.Checkpointer(workdir, every=int(cfg.train.checkpoint_every), keep=2)
    ckpt.save(0, state, data_lib.get_iterator_state(it), force=True)
    ckpt.close()


def continue_training(run: Run, length: int, steps: int, alpha: float, workdir: str,
                      progress_bar=None) -> dict:
    """Train `steps` more steps at `length` in a new workdir; returns the loop's summary."""
    from posjax.training import train_and_evaluate

    cfg = continued_config(run, length, steps, alpha)
    prepare_workdir(run, cfg, workdir)
    return train_and_evaluate(cfg, workdir, progress_bar=progress_bar)
