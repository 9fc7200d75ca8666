"""train_and_evaluate(config, workdir): the MLM pretraining loop, end to end.

Order matters: every check that can fail on a bad config or workdir runs before the first
compile, so a mistake costs seconds, not a compile.

  1. train / mesh fields checked, workdir rules applied (fresh | resume | refuse)
  2. tokenizer loaded from / saved to the workdir; model.vocab_size filled; model config checked
  3. mesh + logical rules -> shardings of the whole state; LAMB
  4. state initialised (jit with out_shardings) or restored from the latest checkpoint, and the
     data iterator restored to the position saved with it
  5. loop: one jitted step per batch; metrics read one step late so the host never stalls the
     device; logging, evaluation, checkpoints, NaN policy, SIGTERM/SIGINT
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Optional

import jax
import numpy as np

from posjax import data, models, schema, storage, writer_lock
from posjax.data.tasks import mixing
from posjax.errors import ConfigError  # noqa: F401  (re-exported: callers catch it from here)
from posjax.training import checkpoints, integrity, losses, multihost, progress, sharding, signals
from posjax.training import state as state_lib
from posjax.training import startup
from posjax.training.optimizer import make_optimizer
from posjax.config.validation import NAN_POLICIES  # noqa: F401  (re-exported; "raise" = "stop")

log = logging.getLogger(__name__)


class NonFiniteLoss(RuntimeError):
    """Raised (nan_policy='stop') when a step's loss or gradient is not finite."""


def train_and_evaluate(config, workdir: str, *, progress_bar: Optional[bool] = None) -> dict:
    """Train config.train.steps steps in workdir (resuming if it holds a checkpoint).

    Returns a summary: {'start_step', 'step', 'first_loss', 'last_loss' (single steps),
    'first_logged_loss', 'last_logged_loss', 'logged_losses' [(step, mean loss of the log
    window)], 'logged_windows' [(first step, last step, mean loss) of each log window], 'eval', 'interrupted', 'checkpoint_dir', 'compile_s', 'wall_s', 'tokens_per_s',
    'tflops_per_device' (of the last log window)}. A SIGTERM/SIGINT during start-up (data,
    vocabulary, restore) stops at once: one line, and {'interrupted': name, 'startup': True,
    'step': None, 'logged_losses': []}. Another live process writing `workdir` is a
    ConfigError naming it (posjax.writer_lock).
    """
    t_start = time.perf_counter()
    # Installed before any start-up work, so a preemption while the data is read or a
    # checkpoint restored is a clean stop, not the default action (posjax.training.signals).
    stopper = signals.GracefulStop(startup=True)
    with stopper:
        try:
            # One writer per workdir (posjax.writer_lock): a second process is refused here,
            # before anything is written; process 0 holds it for all of a multi-process run.
            with writer_lock.hold(workdir, enabled=multihost.is_primary()):
                summary = _train(config, workdir, stopper, progress_bar)
        except signals.Interrupted as e:
            if multihost.is_primary():
                print(signals.startup_message(e.signal_name, workdir), flush=True)
            return {"interrupted": e.signal_name, "startup": True, "start_step": None,
                    "step": None, "logged_losses": [], "wall_s": time.perf_counter() - t_start}
    return summary


def _train(config, workdir: str, stopper, progress_bar: Optional[bool]) -> dict:
    """train_and_evaluate's body; `stopper` is in start-up mode until the loop begins."""
    t_start = time.perf_counter()
    workdir = os.fspath(storage.path(workdir))  # absolute if local; gs://... kept
    resume_step, tokenizer = startup.set_up_workdir(config, workdir)
    mixing.check(config, tokenizer=tokenizer)  # config.data.tasks: lengths need the vocabulary
    view = schema.view(config)  # every field present (posjax.schema), read-only
    t = view.train

    # -- mesh and state shardings -------------------------------------------------------------
    mesh = sharding.make_mesh(view.mesh)
    rules = sharding.logical_rules(view.mesh)
    sharding.check_batch_divisible(int(config.data.batch_size), mesh)
    sharding.check_model_divisible(config, mesh, rules)
    setup = state_lib.make_setup(config, mesh, rules, models.build_model, make_optimizer)
    for line in setup.fallbacks:
        log.warning("sharding fallback: %s", line)

    # -- state: restore or init -----------------------------------------------------------------
    primary = multihost.is_primary()
    ckpt = checkpoints.Checkpointer(workdir, every=int(t.checkpoint_every), keep=int(t.keep_checkpoints))
    global_batch = int(config.data.batch_size)
    rows = multihost.local_rows(mesh, global_batch)  # this process's rows of every batch
    train_iter = startup.on_primary_first(lambda: multihost.make_train_iterator(
        config, tokenizer, int(view.seed), rows, workdir=workdir), "posjax_data")

    def data_item():
        return multihost.data_item(data.get_iterator_state(train_iter), global_batch)

    restored = None
    if resume_step is not None:
        # The newest checkpoint that really restores; broken ones are set aside with a warning
        # naming the problem (posjax.training.integrity). Several processes: process 0 sets
        # aside what is structurally broken while the others wait, then all restore the same
        # step, and a step that still fails to read is an error (no per-process fallback).
        single = jax.process_count() == 1
        if not single:
            if primary:
                integrity.scan(ckpt.directory, startup.warn)
            multihost.sync("posjax_checkpoint_scan")
            ckpt.manager.reload()
        restored = integrity.restore_latest(ckpt, setup.abstract_state, startup.warn, move=single,
                                            fallback=single)
    if restored is not None:
        # Restored straight into the shardings of THIS run's mesh (any mesh, any process count).
        state, item, _ = restored
        data.set_iterator_state(train_iter, multihost.check_data_item(item, global_batch))
        start = int(jax.device_get(state["step"]))
        if primary:  # step 0: a prepared start (a converted model, continued training)
            print(f"starting from the step-0 checkpoint in {ckpt.directory}" if start == 0
                  else f"resuming from step {start} in {ckpt.directory}", flush=True)
    else:
        state = setup.init_fn()
        start = 0

    total = int(t.steps)
    tokens_per_step = int(config.data.batch_size) * int(config.data.seq_len)
    flops = progress.training_flops_per_step(
        config, int(config.data.batch_size), int(config.data.seq_len),
        state_lib.predictions_per_row(config, int(config.data.seq_len)))
    if primary:
        logger = progress.Logger(workdir, total, start, flops_per_step=flops,
                                tokens_per_step=tokens_per_step, num_devices=mesh.size,
                                enable_bar=progress_bar)
    else:  # only process 0 prints and writes TensorBoard
        logger = multihost.NullLogger()
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(setup.abstract_state["params"]))
    logger.write(f"posjax train: {n_params:,} params, mesh {sharding.describe(mesh)}, "
                 f"{jax.process_count()} process(es), {total} steps of {tokens_per_step} tokens, "
                 f"workdir {workdir}")

    eval_every = int(t.eval_every or 0)
    eval_batches = None
    if eval_every:
        eval_batches = startup.on_primary_first(lambda: multihost.make_eval_batches(
            config, tokenizer, int(t.eval_batches), rows, workdir=workdir), "posjax_eval")

    summary: dict[str, Any] = {"start_step": start, "step": start, "first_loss": None,
                               "last_loss": None, "eval": None, "interrupted": None,
                               "checkpoint_dir": ckpt.directory, "logged_losses": [],
                               "logged_windows": []}
    if start >= total:
        logger.write(f"nothing to do: checkpoint step {start} >= train.steps={total}")
        logger.close()
        ckpt.close()
        return summary

    policy = t.nan_policy
    halt_after = int(jax.device_get(state["skipped"])) if policy in ("stop", "raise") else None
    positions: dict = {}  # step -> data iterator state after that many batches
    train_step = eval_step = None
    compiled: dict = {}  # row length -> the compiled train step
    window: dict = {}
    pending = None  # (step, device metrics) of the last dispatched step, read one step late
    step = start
    last_values: dict = {}
    window_first = None  # first step of the logging window being filled

    def read(pending_item):
        """Host side of a finished step: NaN policy and the logging window."""
        nonlocal last_values, window_first
        s, dev = pending_item
        if window_first is None:
            window_first = s
        m = jax.device_get(dev)
        if float(m.get("mlm_dropped", 0.0)) > 0:
            raise RuntimeError(
                f"step {s}: {int(m['mlm_dropped'])} masked tokens fell outside the MLM head's "
                "gathered places (posjax.data.masking.max_predictions is meant to bound every "
                "row); this is a bug in posjax, please report it with the data config")
        if not bool(m["finite"]):
            if policy in ("stop", "raise"):
                raise NonFiniteLoss(
                    f"loss or gradient is not finite at step {s} (train.nan_policy='stop'); "
                    f"{save_last_good(s)}")
            logger.write(f"step {s}: non-finite loss/gradient, update skipped "
                         f"({int(m['skipped_total'])} skipped so far)")
            window["skipped_steps"] = window.get("skipped_steps", 0) + 1
        else:
            for k in ("mlm_loss_sum", "mlm_correct", "mlm_count", "accuracy_count",
                      "sop_loss_sum", "sop_correct", "sop_count", "grad_norm"):
                if k in m:
                    window[k] = window.get(k, 0.0) + float(m[k])
            window["n"] = window.get("n", 0) + 1
            if summary["first_loss"] is None:
                summary["first_loss"] = float(m["loss"])
            summary["last_loss"] = float(m["loss"])
        window["learning_rate"] = float(m["learning_rate"])
        window["skipped_total"] = int(m["skipped_total"])
        if s % int(t.log_every) == 0 or s == total:
            values = losses.summarize(window) if window.get("n") else {"loss": float("nan")}
            values["grad_norm"] = window.get("grad_norm", 0.0) / max(window.get("n", 1), 1)
            values["learning_rate"] = window["learning_rate"]
            values["skipped_total"] = window["skipped_total"]
            last_values = logger.log_train(s, values)
            if primary:
                startup.append_metrics(workdir, dict(last_values, step=s, step_loss=float(m["loss"])))
            if window.get("n"):
                summary.setdefault("first_logged_loss", values["loss"])
                summary["last_logged_loss"] = values["loss"]
                summary["logged_losses"].append((s, values["loss"]))
                summary["logged_windows"].append((window_first, s, values["loss"]))
            window.clear()
            window_first = None

    def save_last_good(s: int) -> str:
        """nan_policy='stop': save the state before step s if it is newer than the latest
        checkpoint (the halted train step kept its parameters, see make_train_step). Returns
        what was done, for the error line."""
        good, latest = s - 1, ckpt.latest_step()
        if good > start and (latest is None or good > latest) and good in positions:
            ckpt.wait()
            rep = state["step"].sharding
            last_good = dict(state, step=jax.device_put(np.int32(good), rep),
                             skipped=jax.device_put(np.int32(halt_after), rep))
            item = multihost.data_item(positions[good], global_batch)
            ckpt.save(good, last_good, item, force=True)
            if ckpt.wait() and ckpt.latest_step() == good:
                return f"saved the last good state, step {good}, in {ckpt.directory}"
        return (f"stopped without saving (nothing newer to save); last good checkpoint: "
                f"step {ckpt.latest_step()} in {ckpt.directory}")

    def flush():
        nonlocal pending
        if pending is not None:
            item, pending = pending, None
            read(item)

    def run_eval(s):
        stats: dict = {}
        for b in eval_batches:
            out = jax.device_get(eval_step(state["params"], multihost.to_global(b, batch_sh, global_batch)))
            for k, v in out.items():
                stats[k] = stats.get(k, 0.0) + float(v)
        values = losses.summarize(stats)
        logger.log_eval(s, values)
        summary["eval"] = dict(values, step=s)
        logger.restart_window()

    try:
        stopper.running()  # start-up is over: a signal now finishes the step and saves
        stop = multihost.StopAgreement(stopper)  # all processes stop after the same step
        while not stop.should_stop(step, last=step >= total):
            if policy in ("stop", "raise"):
                # where the data stood after `step` batches, for save_last_good (3 are enough:
                # metrics are read one step late)
                positions[step] = data.get_iterator_state(train_iter)
                positions.pop(step - 3, None)
            batch = next(train_iter)
            if train_step is None:
                batch_sh = state_lib.batch_shardings(batch, mesh)
                # One program for every policy (make_train_step): 'skip' never halts.
                train_step = state_lib.make_train_step(setup, config, batch_sh, halting=True)
                limit = state_lib.halting_limit(state, halt_after)
                eval_step = state_lib.make_eval_step(setup, config, batch_sh) if eval_every else None
            # One compiled program per row length: text rows have one; the algorithmic
            # curriculum's tapes come in a few bucket lengths (posjax.data.tape).
            length = int(np.shape(batch["input_ids"])[1])
            if length not in compiled:
                tc = time.perf_counter()
                compiled[length] = train_step.lower(
                    state, multihost.to_global(batch, batch_sh, global_batch), limit).compile()
                took = time.perf_counter() - tc
                summary["compile_s"] = summary.get("compile_s", 0.0) + took
                logger.write(f"train step compiled in {took:.1f}s" if len(compiled) == 1 else
                             f"train step compiled for rows of {length} places in {took:.1f}s")
                logger.restart_window()
            state, dev_metrics = compiled[length](
                state, multihost.to_global(batch, batch_sh, global_batch), limit)
            step += 1
            flush()
            pending = (step, dev_metrics)
            logger.step_done()
            if eval_every and step % eval_every == 0:
                flush()
                run_eval(step)
            if step % int(t.checkpoint_every) == 0 and step < total:
                flush()  # never save a step whose NaN check has not been read
                if ckpt.save(step, state, data_item()):
                    logger.write(f"step {step}: saving checkpoint (async) in {ckpt.directory}")
        flush()
        summary["step"] = step
        if stop.stopping:
            if ckpt.latest_step() != step:  # the periodic save may have just written it
                ckpt.save(step, state, data_item(), force=True)
            ckpt.wait()
            summary["interrupted"] = stop.signal_name
            if ckpt.latest_step() == step:
                logger.write(f"{stop.signal_name}: stopped after step {step}; checkpoint of "
                             f"step {step} saved in {ckpt.directory}")
            else:
                logger.write(f"{stop.signal_name}: stopped after step {step}; its checkpoint "
                             f"could not be saved; latest complete checkpoint: step "
                             f"{ckpt.latest_step()} in {ckpt.directory}")
        else:
            if eval_every and step % eval_every != 0:
                run_eval(step)
            if ckpt.latest_step() != step:
                ckpt.save(step, state, data_item(), force=True)
            ckpt.wait()
            if ckpt.latest_step() != step:
                raise checkpoints.CheckpointFailed(
                    f"trained to step {step} but its checkpoint could not be saved (see the "
                    f"warning above); latest complete checkpoint: step {ckpt.latest_step()} "
                    f"in {ckpt.directory}")
            logger.write(f"done: step {step}, checkpoint in {ckpt.directory}")
    finally:
        logger.close()
        ckpt.close()
    summary["wall_s"] = time.perf_counter() - t_start
    summary["tokens_per_s"] = last_values.get("tokens_per_s")
    summary["tflops_per_device"] = last_values.get("tflops_per_device")
    return summary
