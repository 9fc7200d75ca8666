"""The main job's real train step and batches, for the benches that time or profile it
(bench/step_ab.py, bench/dot_profile.py): the config file's model, LAMB, shardings and
donation, fed the data pipeline's own batches of its corpus."""

from __future__ import annotations

import tempfile
from typing import NamedTuple


class JobStep(NamedTuple):
    config: object
    setup: object  # posjax.training.state.Setup
    batch_sh: object
    batches: list  # on the device, in batch_sh


def job_step(config_path: str = "configs/nezha.py", batches: int = 8) -> JobStep:
    import jax

    from bench.train_throughput import load_config
    from posjax import models
    from posjax.training import multihost, sharding, startup, state as state_lib
    from posjax.training.optimizer import make_optimizer

    config = load_config(config_path, "")
    workdir = tempfile.mkdtemp(prefix="posjax_job_step_")
    _, tokenizer = startup.set_up_workdir(config, workdir)
    it = multihost.make_train_iterator(config, tokenizer, 0, (0, 16), workdir=workdir)
    host = [next(it) for _ in range(batches)]
    models.validate_model_config(config, require_vocab=True)
    mesh = sharding.make_mesh(config.mesh)
    setup = state_lib.make_setup(config, mesh, sharding.logical_rules(config.mesh),
                                 models.build_model, make_optimizer)
    batch_sh = state_lib.batch_shardings(host[0], mesh)
    return JobStep(config, setup, batch_sh, [jax.device_put(b, batch_sh) for b in host])
