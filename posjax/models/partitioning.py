"""Logical axis names on parameters and activations, no-op safe without a mesh.

Every parameter carries `out_sharding`: one logical name (or None = replicated) per dimension,
drawn from `batch, length, embed, heads, kv, mlp, vocab`. The training code maps these names to
mesh axes with `nnx.logical_axis_rules(config.mesh.rules)` and `nnx.get_partition_spec`.

Flax 0.12 shards a Variable eagerly at creation when it has `out_sharding` metadata, and
raises if no mesh is active. A laptop run has no mesh, so eager sharding is switched on per
parameter only when it is enabled (`nnx.use_eager_sharding`) and both a mesh and logical axis
rules are active; otherwise the names are metadata only (posjax.training shards the state
from `nnx.get_partition_spec` itself).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx
from flax.core import meta, spmd

Names = tuple[Optional[str], ...]

# BERT initialisation: truncated normal with std 0.02 for every matrix and table.
kernel_init = jax.nn.initializers.truncated_normal(stddev=0.02)


def kernel_initializer(style: str, fan_in: int) -> Callable[..., jax.Array]:
    """A dense kernel's init (model.kernel_init): 'normal' is BERT's kernel_init; 'fan_in' is
    haiku's Linear default, a normal truncated at 2 stddev with stddev 1/sqrt(fan_in) (not
    rescaled for the truncation, as haiku and jax's truncated_normal both leave it)."""
    if style == "normal":
        return kernel_init
    if style == "fan_in":
        return jax.nn.initializers.truncated_normal(stddev=1.0 / math.sqrt(fan_in))
    raise ValueError(f"model.kernel_init: {style!r} is not 'normal' or 'fan_in'")
zeros_init = jax.nn.initializers.zeros
ones_init = jax.nn.initializers.ones


def _eager() -> bool:
    """Shard at creation when asked to (`nnx.use_eager_sharding`, on by default) AND it can
    work: a mesh and logical axis rules are active."""
    return bool(
        nnx.using_eager_sharding()
        and meta.global_mesh_defined()
        and spmd.get_logical_axis_rules()
    )


def next_key(stream: nnx.RngStream) -> jax.Array:
    """`stream()`: the stream's next key, the same key as flax's RngStream.__call__ (the key
    folded with the count, then the count plus one). The count is replaced whole instead of
    flax's `count[...] += 1`: that indexed write compares the old and new counts' shardings,
    and under a trace (every model build under nnx.eval_shape or jit, every dropout in a
    traced step) reading a tracer's sharding builds an error message, then dropped, by walking
    the traced program and printing its equations: ~15% of a model's trace time."""
    count = stream.count[...]
    key = jax.random.fold_in(stream.key[...], count)
    stream.count.set_value(count + 1)
    return key


def param(
    key: jax.Array,
    init: Callable[..., jax.Array],
    shape: Sequence[int],
    names: Names,
    dtype=jnp.float32,
) -> nnx.Param:
    """A float32 (by default) parameter with one logical axis name per dimension."""
    shape = tuple(int(s) for s in shape)
    if len(names) != len(shape):
        raise ValueError(f"param of shape {shape} needs {len(shape)} axis names, got {names}")
    return nnx.Param(init(key, shape, dtype), out_sharding=tuple(names), eager_sharding=_eager())


def as_param(value: jax.Array) -> nnx.Param:
    """Wrap a scheme parameter (shape unknown to the model) as a replicated nnx.Param."""
    value = jnp.asarray(value)
    return nnx.Param(value, out_sharding=(None,) * value.ndim, eager_sharding=_eager())


def attention_shard_axes() -> Optional[tuple]:
    """(batch, heads) mesh axes of the attention activations under the active mesh and logical
    rules, for the kernel's shard_map (posjax.attention.attend(shard_axes=...)); None without
    a mesh or rules (one device, or a laptop run)."""
    if jax.sharding.get_abstract_mesh().empty or not spmd.get_logical_axis_rules():
        return None
    return tuple(nn.logical_to_mesh_axes(("batch", "heads")))


def batch_shards() -> Optional[int]:
    """How many ways the logical 'batch' axis is split under the active mesh and rules (1 when
    it maps to no mesh axis); None without a mesh or rules."""
    axes = attention_shard_axes()
    if axes is None:
        return None
    batch = axes[0]
    batch = () if batch is None else (batch,) if isinstance(batch, str) else tuple(batch)
    sizes = dict(jax.sharding.get_abstract_mesh().shape)
    n = 1
    for a in batch:
        n *= int(sizes[a])
    return n


def _mesh_axes(name: Optional[str]) -> tuple:
    axes = nn.logical_to_mesh_axes((name,))[0] if name is not None else None
    return () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)


def gathered(x: jax.Array, names: Names) -> jax.Array:
    """A parameter as a layer uses it: constrained to its own split minus the batch's mesh
    axes, i.e. gathered over 'fsdp' (FSDP's all-gather before use) while a split over
    'tensor' stays; identity without a mesh or rules, and under 'data' (nothing to gather).

    Why explicit: the forward product and both backward products then read one gathered
    value. Left to XLA, each product gathers its own operand, and on CPU, where the bf16
    products take their operands transposed behind optimization barriers
    (posjax.tiling.mixed), the backward's transposed kernel is a different operand from
    the forward's, so every kernel was gathered twice per step. The transpose of the
    constraint is the gradient's reduce-scatter back onto the parameter's split.
    """
    if attention_shard_axes() is None:
        return x
    batch = set(_mesh_axes("batch"))
    return constrain(x, tuple(None if set(_mesh_axes(n)) & batch else n for n in names))


def constrain(x: jax.Array, names: Names) -> jax.Array:
    """Sharding constraint on an activation by logical names; identity without mesh/rules."""
    return nn.with_logical_constraint(x, tuple(names))


class HookParams(nnx.Module):
    """A scheme's parameter pytree (from init_embed / init_layer) held as nnx.Param leaves.

    `value()` hands the hooks exactly the pytree that `init_*` returned (same dict layout),
    now with trainable leaves.
    """

    def __init__(self, tree: Any):
        self.tree = nnx.data(jax.tree.map(as_param, tree))

    def value(self) -> Any:
        return jax.tree.map(lambda v: v[...], self.tree,
                            is_leaf=lambda x: isinstance(x, nnx.Variable))
