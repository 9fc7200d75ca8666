"""Continued training of a trained model at a longer length, under one extension method.

`continued_config(run, variant, length, steps)` is the source config rewritten by the method
(posjax.evaluation.methods.make_cell: e.g. 'hierarchical' with its alpha, or a learned table
of L rows made by 'tile' / 'interpolate' / 'stretch' / 'new_rows'), trained at `length`:
data.seq_len = L, data.batch_size scaled so a step holds about as many tokens as before (or
`batch_size` rows of L: the same for every method, so every method sees equal tokens per
step), train.steps = `steps` (a fresh warmup), a checkpoint every `checkpoint_every` steps, all
of them kept (the recovery curve evaluates each: posjax.evaluation.run.recovery), and no
evaluation inside the training loop (the curve's own evaluation replaces it).

`truncate` is the control of such a curve: the same continued training at the trained length
T (the source's own positions, nothing rewritten), each step's rows of L cut into rows of T
(L / T times the rows: the same tokens per step), read in windows of T as truncate reads the
longer rows. Without it, what a method gains by training on new text (adapting to its
domain) cannot be told apart from what it recovers of its positions.

`schedule='constant'` (the default) holds the learning rate at its peak after the warmup, so
the checkpoint of step s is what s steps at that rate give, whatever the run's length; with
'linear' (the source's BERT schedule, decaying to 0 at `steps`) step s of a 400-step run and
of a 1000-step run would differ in learning rate too. `seed` (default: the source's) sets the
continued run's data order, masks and dropout; a recovery curve over several seeds runs one
continued training per seed.

`continue_training(run, variant, length, steps, workdir)` creates the NEW workdir (the source
is only read): config.json, the source's vocab.txt, and a step-0 checkpoint holding the
source params rewritten by the method with a fresh optimizer; then
posjax.training.train_and_evaluate trains from there. Running it again resumes from the
latest checkpoint, and does nothing once step `steps` is saved.
"""

from __future__ import annotations

import jax
import ml_collections

from posjax import data as data_lib
from posjax import models, schema, storage, training, writer_lock
from posjax.errors import ConfigError
from posjax.evaluation import methods
from posjax.evaluation.run.restore import VOCAB_FILE, Run, conform, load_params
from posjax.training import checkpoints, sharding, startup
from posjax.training import state as state_lib
from posjax.training import workdir as workdir_lib
from posjax.training.optimizer import SCHEDULES, make_optimizer


class Stopped(Exception):
    """SIGTERM / SIGINT stopped a training run that eval.py started (its last step is saved):
    eval.py stops too instead of evaluating a half-trained model, and resumes when rerun."""


def finished(summary: dict, workdir: str) -> dict:
    """`summary` of posjax.training.train_and_evaluate, or Stopped if a signal ended it."""
    if summary.get("interrupted"):
        raise Stopped(f"eval: {summary['interrupted']} stopped the training in {workdir} (its "
                      "last step is saved); run the same command again to resume")
    return summary


def _cell(run: Run, variant: methods.Variant, length: int, field: str = "recovery_methods"):
    if variant.shuffle or (variant.method == methods.TRUNCATE and variant.logn):
        raise ConfigError(field, variant.label, "a method without shuffled positions (and "
                          "truncate without +logn) for continued training")
    try:
        if variant.method == methods.TRUNCATE:  # train as the source does, where truncate
            if length > run.trained_length:    # applies at the curve's length
                methods.make_cell(run, variant, length)
            return methods.make_cell(run, methods.Variant("as_is"), run.trained_length)
        return methods.make_cell(run, variant, length)
    except methods.NotApplicable as e:
        raise ConfigError(field, variant.label,
                          f"a method that runs {run.name} at length {length}: {e}") from None


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_options(*, seed=None, schedule: str = "constant", batch_size=None) -> None:
    """ConfigError on a bad continued-training option (before anything is trained)."""
    if seed is not None and not (_is_int(seed) and seed >= 0):
        raise ConfigError("continue_seeds", seed, "ints >= 0 (one continued run per seed)")
    if schedule not in SCHEDULES:
        raise ConfigError("continue_schedule", schedule, f"one of {', '.join(SCHEDULES)}")
    if batch_size is not None and not (_is_int(batch_size) and batch_size >= 1):
        raise ConfigError("continue_batch_size", batch_size,
                          "unset (the source's tokens per step) or a positive int (rows of L)")


def continued_config(run: Run, variant: methods.Variant, length: int, steps: int, *,
                     checkpoint_every: int | None = None, seed: int | None = None,
                     schedule: str = "constant",
                     batch_size: int | None = None) -> ml_collections.ConfigDict:
    if not _is_int(steps) or steps < 1:
        raise ConfigError("recovery_steps", steps, "a positive int (the longest continued run)")
    if not _is_int(length) or length <= run.trained_length:
        raise ConfigError("continue_length", length,
                          f"an int above the trained length {run.trained_length}")
    check_options(seed=seed, schedule=schedule, batch_size=batch_size)
    cfg = _cell(run, variant, length).config
    T = run.trained_length
    rows = int(batch_size or max(1, int(cfg.data.batch_size) * T // length))  # rows of L
    if variant.method == methods.TRUNCATE:  # the control: those tokens in rows of T
        if length % T:
            raise ConfigError("continue_length", length, f"a multiple of the trained length "
                              f"{T} for truncate's continued training (whole rows of {T})")
        cfg.data.seq_len, cfg.data.batch_size = int(T), rows * (length // T)
    else:
        cfg.data.seq_len, cfg.data.batch_size = int(length), rows
    if seed is not None:
        cfg.seed = int(seed)
    every = int(checkpoint_every or steps)
    t = cfg.train
    t.schedule = schedule
    t.steps = int(steps)
    # at most a tenth of the run, at least 1 step, and below train.steps (a 1-step run: none)
    warmup = int(schema.view(cfg).train.warmup_steps or 0)
    t.warmup_steps = min(max(1, min(warmup, steps // 10)), steps - 1)
    t.checkpoint_every = every
    t.keep_checkpoints = steps // every + 2  # every checkpoint (and step 0) stays
    t.eval_every = 0  # the recovery curve evaluates the checkpoints on the evaluator's rows
    t.log_every = max(1, min(int(t.log_every), steps))
    return cfg


def prepare_workdir(run: Run, variant: methods.Variant, cfg: ml_collections.ConfigDict,
                    workdir: str) -> None:
    """Create the new workdir with the step-0 checkpoint (no-op if it already has one), as
    its one writer (posjax.writer_lock)."""
    workdir = storage.join(workdir)
    if workdir == run.workdir:
        raise ConfigError("continue_workdir", workdir, "a directory other than the source workdir")
    with writer_lock.hold(workdir, field="continue_workdir"):
        _prepare_workdir(run, variant, cfg, workdir)


def _prepare_workdir(run: Run, variant: methods.Variant, cfg: ml_collections.ConfigDict,
                     workdir: str) -> None:
    if checkpoints.latest_step(workdir) is not None:
        return
    if writer_lock.entries(workdir):
        raise ConfigError("continue_workdir", workdir,
                          "an empty or new directory (it holds files but no checkpoint)")
    rewrite = _cell(run, variant, int(cfg.data.seq_len)).rewrite
    storage.makedirs(workdir)
    # config.json first (it marks the directory as a posjax workdir), then the source's
    # vocab.txt, which startup.set_up_workdir then reuses instead of building a new vocabulary.
    workdir_lib.save_config(cfg, workdir)
    storage.write_bytes(storage.join(workdir, VOCAB_FILE),
                        storage.read_bytes(storage.join(run.workdir, VOCAB_FILE)))
    _, tokenizer = startup.set_up_workdir(cfg, workdir)
    view = schema.view(cfg)
    mesh = sharding.make_mesh(view.mesh)
    rules = sharding.logical_rules(view.mesh)
    setup = state_lib.make_setup(cfg, mesh, rules, models.build_model, make_optimizer)
    state = setup.init_fn()
    abstract = jax.tree.map(lambda x: x, state["params"])
    params = conform(abstract, rewrite(load_params(run)))
    methods.check_shapes(abstract, params, run.scheme, int(cfg.data.seq_len),
                         int(cfg.model.max_length))
    state["params"] = jax.tree.map(
        lambda new, old: jax.device_put(jax.numpy.asarray(old).astype(new.dtype), new.sharding),
        abstract, params)
    it = data_lib.make_train_iterator(cfg, tokenizer, int(view.seed), workdir=workdir)
    ckpt = checkpoints.Checkpointer(workdir, every=int(cfg.train.checkpoint_every),
                                    keep=int(cfg.train.keep_checkpoints))
    ckpt.save(0, state, data_lib.get_iterator_state(it), force=True)
    ckpt.close()


def continue_training(run: Run, variant: methods.Variant, length: int, steps: int,
                      workdir: str, *, checkpoint_every: int | None = None,
                      progress_bar=None, seed: int | None = None, schedule: str = "constant",
                      batch_size: int | None = None) -> dict:
    """Train `steps` steps at `length` in a new workdir; returns the loop's summary."""
    cfg = continued_config(run, variant, length, steps, checkpoint_every=checkpoint_every,
                           seed=seed, schedule=schedule, batch_size=batch_size)
    # One hold over both steps: no other process slips in between the step-0 checkpoint and
    # the training that starts from it.
    with writer_lock.hold(workdir, field="continue_workdir"):
        prepare_workdir(run, variant, cfg, workdir)
        summary = training.train_and_evaluate(cfg, workdir, progress_bar=progress_bar)
    return finished(summary, workdir)
