"""The train state as plain pytrees, its shardings, and the jitted train / eval steps.

Functional style: the nnx model is split once into (graphdef, params, rest). The state that
jit sees is a dict of arrays,

    {'params': pure dict, 'opt_state': optax state, 'step': int32, 'rng': uint32[2],
     'skipped': int32}

and the step merges graphdef + params back into a module inside the trace (nnx.merge is
cheap there: it only rebuilds Python objects around tracers). Plain dicts keep optax, orbax
and the sharding trees simple.

Every array of the state gets a NamedSharding from its parameter's logical axis names
(optimizer moments inherit the sharding of the parameter they track); the train step is ONE
jax.jit with explicit in/out shardings and the state donated.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import flax.linen as nn
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from posjax import schema
from posjax.data import masking
from posjax.training import losses, sharding


@dataclasses.dataclass
class Setup:
    """Everything the loop needs that is fixed for the run."""

    graphdef: Any
    rest: Any  # non-Param model state (nnx.State), replicated, never updated
    params_treedef: Any  # treedef of the nnx.State of params (to rebuild it from a pure dict)
    abstract_state: Any  # ShapeDtypeStructs with .sharding, for init out_shardings and restore
    state_shardings: Any
    tx: optax.GradientTransformation
    schedule: Callable
    init_fn: Callable  # jitted: () -> state
    logical_specs: Any
    fallbacks: list
    mesh: Any = None
    rules: Any = None

    def activation_sharding(self):
        """Context for tracing the model: makes its `constrain(x, names)` calls real sharding
        constraints (layer boundaries, q/k/v, mlp, logits) under this mesh and these rules."""
        return _activation_context(self.mesh, self.rules)


@contextlib.contextmanager
def _activation_context(mesh, rules):
    if mesh is None or rules is None:
        yield
        return
    # Inside jit only the abstract mesh may be set; flax's logical constraints read it.
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(rules):
        yield


def _eager_off():
    return nnx.use_eager_sharding(False)


def abstract_model(config, build_model):
    """The model built abstractly (no memory): graphdef, param shapes, logical specs, rest."""
    with _eager_off():
        model = nnx.eval_shape(lambda: build_model(config, nnx.Rngs(0)))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    specs = nnx.get_partition_spec(params)
    return graphdef, params, rest, specs


def to_params_state(params_treedef, pure):
    """Pure dict of params -> nnx.State (same leaf order: both flatten dict keys sorted)."""
    return jax.tree.unflatten(params_treedef, jax.tree.leaves(pure))


def make_setup(config, mesh, rules, build_model, make_optimizer) -> Setup:
    graphdef, abs_params_state, abs_rest, specs_state = abstract_model(config, build_model)
    abs_params = nnx.to_pure_dict(abs_params_state)
    logical_specs = nnx.to_pure_dict(specs_state)
    params_treedef = jax.tree.structure(abs_params_state)
    assert params_treedef.num_leaves == len(jax.tree.leaves(abs_params))
    tx, schedule = make_optimizer(config.train, abs_params, logical_specs, config.position)

    fallbacks: list = []
    param_sh = sharding.tree_shardings(abs_params, logical_specs, mesh, rules, fallbacks)
    abs_opt = jax.eval_shape(tx.init, abs_params)
    opt_sh = _opt_shardings(abs_opt, abs_params, param_sh, mesh)
    rep = sharding.replicated(mesh)
    state_sh = {"params": param_sh, "opt_state": opt_sh, "step": rep, "rng": rep, "skipped": rep}

    seed = int(schema.view(config).seed)

    def init():
        key = jax.random.PRNGKey(seed)
        init_key, train_key = jax.random.split(key)
        with _eager_off():
            model = build_model(config, nnx.Rngs(params=init_key))
        _, params_state, _ = nnx.split(model, nnx.Param, ...)
        params = nnx.to_pure_dict(params_state)
        return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32),
                "rng": train_key, "skipped": jnp.zeros((), jnp.int32)}

    init_fn = jax.jit(init, out_shardings=state_sh)
    abstract = jax.eval_shape(init)
    abstract = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, state_sh)
    rest = _concrete_rest(abs_rest)
    return Setup(graphdef, rest, params_treedef, abstract, state_sh, tx, schedule, init_fn,
                 logical_specs, fallbacks, mesh, rules)


def _concrete_rest(abs_rest):
    """posjax models keep no non-Param state; anything abstract here must be materialised."""
    leaves = jax.tree.leaves(abs_rest)
    if leaves:
        raise NotImplementedError(
            "the model holds non-Param state (e.g. nnx.Rngs or BatchStat); the trainer passes "
            f"rngs at call time and expects none: {abs_rest}")
    return abs_rest


def _opt_shardings(abs_opt, abs_params, param_sh, mesh):
    """Moments (trees shaped like params) get the params' shardings; scalars replicate."""
    params_struct = jax.tree.structure(abs_params)
    rep = sharding.replicated(mesh)

    def is_params_like(x):
        try:
            return jax.tree.structure(x) == params_struct
        except Exception:
            return False

    return jax.tree.map(lambda x: param_sh if is_params_like(x) else rep, abs_opt,
                        is_leaf=lambda x: is_params_like(x))


def batch_shardings(batch: dict, mesh) -> dict:
    return {k: sharding.batch_sharding(mesh, v.ndim) for k, v in batch.items()}


def with_prediction_positions(config, batch: dict) -> dict:
    """An MLM batch plus 'mlm_positions' [B, P], P = the most places a row can have masked,
    so the model's head runs on P places instead of all L (BERT's max_predictions_per_seq:
    at L=128, 20 of 128). Causal LMs and rows too short to gain are left alone."""
    if "mlm_weights" not in batch:
        return batch
    count = predictions_per_row(config, batch["mlm_weights"].shape[1])
    if count is None:
        return batch
    return dict(batch, mlm_positions=losses.prediction_positions(batch["mlm_weights"], count))


def predictions_per_row(config, length: int):
    """P of with_prediction_positions for rows of `length`, or None where the head runs
    everywhere (causal LM, the algorithmic class head, or no saving)."""
    model = schema.view(config).model
    if bool(model.causal) or model.output_classes:  # the class head is read at every place
        return None
    count = masking.max_predictions(length, masking.mask_rate(config))  # the masking rule's bound
    return count if 0 < count < length else None


NO_LIMIT = np.iinfo(np.int32).max  # the `limit` of a train step that never halts ('skip')


def halting_limit(state, halt_after: Optional[int]) -> jax.Array:
    """The replicated `limit` argument of a halting train step: `halt_after` (nan_policy
    'stop': the `skipped` count the run started with), or NO_LIMIT for None ('skip')."""
    value = NO_LIMIT if halt_after is None else halt_after
    return jax.device_put(np.int32(value), state["step"].sharding)


def make_train_step(setup: Setup, config, batch_sh: dict, *, halting: bool = False,
                    dense_rows: bool = False):
    """The jitted train step, step(state, batch), or step(state, batch, limit) with `halting`.

    limit (int32 scalar, replicated): once a non-finite step raises `skipped` above it, every
    later step leaves the parameters and optimizer state untouched as well. The host reads
    each step's `finite` flag one step late, so without this the step after a non-finite one
    would already have overwritten (donated) the last good parameters that nan_policy='stop'
    saves before exiting. train.py's loop always halts, with `halting_limit`: 'stop' passes
    the `skipped` count the run started with, 'skip' passes NO_LIMIT. A runtime value rather
    than a constant, so both policies run ONE compiled program, and a 'skip' run resumed from
    a 'stop' run's last good state finishes bit for bit where a 'skip' run from scratch does,
    whatever the compiler would make of two different programs.
    dense_rows: every batch's rows are one example each, no padding (segment_ids all 1), as
    posjax.data.random_batch makes them: attention then builds no masks (Encoder)."""
    causal = bool(schema.view(config).model.causal)
    graphdef, rest, treedef, tx = setup.graphdef, setup.rest, setup.params_treedef, setup.tx
    schedule = setup.schedule

    def loss_fn(params, batch, dropout_key):
        batch = with_prediction_positions(config, batch)
        model = nnx.merge(graphdef, to_params_state(treedef, params), rest)
        with setup.activation_sharding():
            outputs = model(batch, deterministic=False, rngs=nnx.Rngs(dropout=dropout_key),
                            dense_rows=dense_rows)
        return losses.pretraining_loss(outputs, batch, causal)

    def step_fn(state, batch, limit=None):
        step = state["step"]
        # Dropout keys depend only on (seed, step): a resumed run draws the same masks.
        dropout_key = jax.random.fold_in(state["rng"], step)
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state["params"], batch, dropout_key)
        grad_norm = optax.tree.norm(grads)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

        def apply(_):
            updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
            return optax.apply_updates(state["params"], updates), opt_state

        def keep(_):
            return state["params"], state["opt_state"]

        # A non-finite step never touches the state (both nan policies); the host decides
        # whether to stop ('stop') or carry on and count it ('skip').
        ok = finite if limit is None else finite & (state["skipped"] <= limit)
        params, opt_state = jax.lax.cond(ok, apply, keep, None)
        new_state = {"params": params, "opt_state": opt_state, "step": step + 1,
                     "rng": state["rng"], "skipped": state["skipped"] + (~finite).astype(jnp.int32)}
        metrics = dict(stats, loss=loss, grad_norm=grad_norm, finite=finite,
                       learning_rate=schedule(step), skipped_total=new_state["skipped"])
        return new_state, metrics

    rep = NamedSharding(next(iter(batch_sh.values())).mesh, P())
    # Without `halting` the step is called with two arguments, so `limit` keeps its default.
    in_shardings = (setup.state_shardings, batch_sh) + ((rep,) if halting else ())
    return jax.jit(step_fn, in_shardings=in_shardings,
                   out_shardings=(setup.state_shardings, rep), donate_argnums=(0,))


def make_eval_step(setup: Setup, config, batch_sh: dict):
    causal = bool(schema.view(config).model.causal)
    graphdef, rest, treedef = setup.graphdef, setup.rest, setup.params_treedef

    def eval_fn(params, batch):
        batch = with_prediction_positions(config, batch)
        model = nnx.merge(graphdef, to_params_state(treedef, params), rest)
        with setup.activation_sharding():
            outputs = model(batch, deterministic=True)
        _, stats = losses.pretraining_loss(outputs, batch, causal)
        return stats

    rep = NamedSharding(next(iter(batch_sh.values())).mesh, P())
    return jax.jit(eval_fn, in_shardings=(setup.state_shardings["params"], batch_sh),
                   out_shardings=rep)
