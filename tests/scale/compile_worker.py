"""Subprocess side of tests/scale/test_compile_sharding.py: lower + compile (never run) the
train and eval steps under every preset on 8 simulated CPU devices, and mark in stderr which
program each line of the compiler's log belongs to.

Not collected by pytest (no test_ prefix). Run it with 8 simulated devices:

    XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu PYTHONPATH=. \
        python tests/scale/compile_worker.py [--hlo_dir=DIR] [scheme ...]

Each program's compile log (XLA writes its SPMD partitioner warnings straight to fd 2) lands
between a line `=== BEGIN <name>` and `=== END <name>` written to stderr by this process, so
the test can tell which program a warning came from. The first program is a canary that is
known to make the partitioner replicate a whole tensor (a table lookup whose output is split
on its feature axis, consumed split on its batch axis), proving that the warning would be seen.
"""

from __future__ import annotations

import os
import sys

# (preset, data, fsdp, tensor): the meshes of tests/scale/worker.py
MESHES = (("data", 8, 1, 1), ("fsdp", 2, 4, 1), ("fsdp_tp", 2, 2, 2))
SCHEMES = ("learned", "rope", "t5", "nezha")
# Eval steps only under the preset that also splits the vocabulary and heads: the eval step is
# the train step's forward pass without dropout, and before the embedding lookups were
# annotated only 'fsdp_tp' showed a rematerialization there (kept out of 'data' and 'fsdp'
# to hold the test's compile time down).
EVAL_PRESETS = ("fsdp_tp",)
CANARY = "canary"
# The word table [VOCAB, hidden 32]: no other parameter has its shape (the MLP's are [32, 64]
# and [64, 32]), so the test can find its collectives by shape.
VOCAB = 48


def tiny_config(scheme, preset, data, fsdp, tensor):
    from posjax.config import defaults

    c = defaults.get_config("tiny")
    c.position = defaults.position(scheme)
    c.mesh.preset, c.mesh.data, c.mesh.fsdp, c.mesh.tensor = preset, data, fsdp, tensor
    c.model.num_layers = 1  # compile time: one layer shows every per-layer collective
    c.model.vocab_size = VOCAB
    c.data.batch_size = 8
    return c


def batch_structs(config, mesh):
    import jax
    import numpy as np

    from posjax.training import state as state_lib

    b, length = int(config.data.batch_size), int(config.data.seq_len)
    shapes = {k: ((b, length), np.int32) for k in
              ("input_ids", "token_type_ids", "positions", "segment_ids", "mlm_targets")}
    shapes["mlm_weights"] = ((b, length), np.float32)
    structs = {k: jax.ShapeDtypeStruct(s, d) for k, (s, d) in shapes.items()}
    sh = state_lib.batch_shardings(structs, mesh)
    return {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=sh[k]) for k, v in structs.items()}, sh


def steps(config, with_eval):
    """[(jitted step, abstract args)] of the train step (and the eval step) for `config`."""
    from posjax import models
    from posjax.training import sharding, state as state_lib
    from posjax.training.optimizer import make_optimizer

    mesh = sharding.make_mesh(config.mesh)
    rules = sharding.logical_rules(config.mesh)
    sharding.check_model_divisible(config, mesh, rules)
    setup = state_lib.make_setup(config, mesh, rules, models.build_model, make_optimizer)
    batch, batch_sh = batch_structs(config, mesh)
    out = [(state_lib.make_train_step(setup, config, batch_sh), (setup.abstract_state, batch))]
    if with_eval:
        out.append((state_lib.make_eval_step(setup, config, batch_sh),
                    (setup.abstract_state["params"], batch)))
    return out


def preset_program(preset, data, fsdp, tensor, schemes):
    """One program holding the train step of every scheme (and, under EVAL_PRESETS, the eval
    step) on one mesh, lowered from abstract shapes. Each step keeps its own jit with its in /
    out shardings, so it is partitioned exactly as when it is compiled alone; one compile of
    the lot costs about half of compiling them one by one (a tiny program's compile is mostly
    fixed cost)."""
    import jax

    parts = [p for s in schemes
             for p in steps(tiny_config(s, preset, data, fsdp, tensor), preset in EVAL_PRESETS)]
    fns = [f for f, _ in parts]
    return jax.jit(lambda *args: [f(*a) for f, a in zip(fns, args)]).lower(*[a for _, a in parts])


def canary():
    """A lookup whose output is split on features, then forced onto the batch split."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from posjax.training import sharding

    mesh = sharding.make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    table_sh = NamedSharding(mesh, P("tensor", "fsdp"))
    ids_sh = NamedSharding(mesh, P(("data", "fsdp"), None))

    def f(table, ids):
        out = jnp.take(table, ids, axis=0)
        out = jax.lax.with_sharding_constraint(out, NamedSharding(mesh, P(None, None, "fsdp")))
        return jax.lax.with_sharding_constraint(out * 2, NamedSharding(mesh, P(("data", "fsdp"))))

    return jax.jit(f, in_shardings=(table_sh, ids_sh)).lower(
        jax.ShapeDtypeStruct((64, 32), jnp.float32), jax.ShapeDtypeStruct((8, 32), jnp.int32))


def compile_marked(name, lowered, hlo_dir=None):
    print(f"=== BEGIN {name}", file=sys.stderr, flush=True)
    # Backend optimisation off: the check is about SPMD partitioning, which runs before it,
    # and LLVM's passes are a third of a tiny program's compile time.
    compiled = lowered.compile(compiler_options={"xla_backend_optimization_level": 0,
                                                 "xla_llvm_disable_expensive_passes": True})
    print(f"=== END {name}", file=sys.stderr, flush=True)
    if hlo_dir:  # the partitioned program, for the test's collective checks
        with open(os.path.join(hlo_dir, f"{name}.hlo"), "w") as fh:
            fh.write(compiled.as_text())


def main(schemes, hlo_dir=None):
    import jax

    assert jax.device_count() == 8, jax.devices()
    compile_marked(CANARY, canary())
    for preset, d, f, t in MESHES:
        compile_marked(preset, preset_program(preset, d, f, t, schemes), hlo_dir)
    print("compiled", file=sys.stderr, flush=True)


if __name__ == "__main__":
    # a cache hit would skip the partitioner and its warnings: this process must compile
    os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
    args = sys.argv[1:]
    hlo = [a for a in args if a.startswith("--hlo_dir=")]
    main([a for a in args if a not in hlo] or SCHEMES, hlo[-1].split("=", 1)[1] if hlo else None)
