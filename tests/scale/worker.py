"""Subprocess side of tests/scale: runs under simulated CPU devices / real CPU processes.

Not collected by pytest (no test_ prefix). The tests start it with
XLA_FLAGS=--xla_force_host_platform_device_count=N so the pytest process keeps one device.

    PYTHONPATH=. python tests/scale/worker.py meshes   ROOT OUT.json   # one process, 8 devices
    PYTHONPATH=. python tests/scale/worker.py process  ROOT OUT.json PORT PID   # one of 2 processes, 4 devices each

Every run uses the same tiny config (posjax.config.defaults tiny, dropout on, 5 steps) so losses
and parameters can be compared across meshes, presets and process counts.
"""

from __future__ import annotations

import json
import os
import sys

STEPS = 5
MESHES = {  # name -> (data, fsdp, tensor, preset, use only the first device)
    "1x1x1": (1, 1, 1, "fsdp_tp", True),
    "8x1x1": (8, 1, 1, "data", False),
    "2x4x1": (2, 4, 1, "fsdp", False),
    "2x2x2": (2, 2, 2, "fsdp_tp", False),
}


def tiny_config(data=-1, fsdp=1, tensor=1, preset="fsdp_tp", steps=STEPS):
    from posjax.config import defaults

    c = defaults.get_config("tiny")
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor, c.mesh.preset = data, fsdp, tensor, preset
    c.model.num_layers = 1  # compile time: this file runs ~8 compiles on 2 busy cores
    c.data.batch_size = 8
    c.train.steps, c.train.warmup_steps, c.train.log_every = steps, 1, 1
    c.train.eval_every, c.train.checkpoint_every = 0, 3
    return c


def direct_run(config, devices, workdir, steps=STEPS):
    """The library pieces train.py uses, stepped by hand: losses, params and shardings."""
    import jax
    import numpy as np

    import posjax.data as data
    import posjax.models as models
    from posjax.training import multihost, sharding, state as state_lib
    from posjax.training.optimizer import make_optimizer, path_str

    os.makedirs(workdir, exist_ok=True)
    tok = data.load_or_build(config, workdir)
    config.model.vocab_size = int(tok.vocab_size)
    mesh = sharding.make_mesh(config.mesh, devices)
    rules = sharding.logical_rules(config.mesh)
    sharding.check_model_divisible(config, mesh, rules)
    setup = state_lib.make_setup(config, mesh, rules, models.build_model, make_optimizer)
    batch_size = int(config.data.batch_size)
    it = multihost.make_train_iterator(config, tok, int(config.seed),
                                       multihost.local_rows(mesh, batch_size), workdir=workdir)
    state = setup.init_fn()
    batch = next(it)
    batch_sh = state_lib.batch_shardings(batch, mesh)
    # halting: the program train.py's loop compiles, so its runs below load these steps from
    # the compilation cache instead of compiling (limit 0: nan_policy 'stop', nothing skipped)
    step_fn = state_lib.make_train_step(setup, config, batch_sh, halting=True)
    limit = state_lib.halting_limit(state, 0)
    losses = []
    for _ in range(steps):
        state, m = step_fn(state, multihost.to_global(batch, batch_sh, batch_size), limit)
        losses.append(float(m["loss"]))
        batch = next(it)
    flat = jax.tree_util.tree_flatten_with_path(state["params"])[0]
    params = {path_str(p): np.asarray(jax.device_get(x)) for p, x in flat}
    specs = {path_str(p): [None if a is None else (list(a) if isinstance(a, tuple) else a)
                           for a in x.sharding.spec] for p, x in flat}
    return losses, params, specs


def train_losses(summary):
    return [loss for _, loss in summary["logged_losses"]]


def meshes(root, out):
    import jax
    import numpy as np

    from posjax.training import train_and_evaluate

    assert jax.device_count() == 8, jax.devices()
    result = {"losses": {}, "specs": {}}
    params = {}
    for name, (d, f, t, preset, first) in MESHES.items():
        devices = jax.devices()[:1] if first else jax.devices()
        losses, p, specs = direct_run(tiny_config(d, f, t, preset), devices, os.path.join(root, "direct"))
        result["losses"][name], result["specs"][name] = losses, specs
        params[name] = p
    np.savez(os.path.join(root, "params.npz"),
             **{f"{m}|{k}": v for m, p in params.items() for k, v in p.items()})

    # train.py's loop: 5 steps under 8x1x1 (checkpoints at 3 and 5); its step-3 checkpoint is
    # then resumed under 2x2x2 here and on 2 processes by `process` (same learning-rate schedule).
    import shutil

    straight = train_and_evaluate(tiny_config(8, 1, 1, "data"), os.path.join(root, "straight"),
                                  progress_bar=False)
    result["loop_8x1x1"] = train_losses(straight)
    for name in ("resume_2x2x2", "resume_processes"):
        shutil.copytree(os.path.join(root, "straight"), os.path.join(root, name))
        shutil.rmtree(os.path.join(root, name, "checkpoints", str(STEPS)))
    resumed = train_and_evaluate(tiny_config(2, 2, 2, "fsdp_tp"), os.path.join(root, "resume_2x2x2"),
                                 progress_bar=False)
    result["resumed_2x2x2"] = {"start": resumed["start_step"], "losses": train_losses(resumed)}
    with open(out, "w") as f:
        json.dump(result, f)


def process(root, out, port, pid):
    from posjax.training import multihost

    multihost.initialize(f"127.0.0.1:{port}", 2, int(pid))
    import jax

    from posjax.training import train_and_evaluate

    assert jax.process_count() == 2 and jax.device_count() == 8, (jax.process_count(), jax.devices())
    # 2 processes x 4 devices; 'data' spans the processes over "DCN" (hybrid mesh by process).
    config = tiny_config(2, 2, 2, "fsdp_tp")
    config.mesh.dcn_data = 2
    fresh = train_and_evaluate(config, os.path.join(root, "two_processes"), progress_bar=False)
    # the single-process 8x1x1 checkpoint of step 3, continued on 2 processes under 2x2x2
    resumed = train_and_evaluate(tiny_config(2, 2, 2, "fsdp_tp"), os.path.join(root, "resume_processes"),
                                 progress_bar=False)
    if jax.process_index() == 0:
        with open(out, "w") as f:
            json.dump({"losses": train_losses(fresh), "resumed_start": resumed["start_step"],
                       "resumed_losses": train_losses(resumed)}, f)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {"meshes": meshes, "process": process}[mode](*args)
