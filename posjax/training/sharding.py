"""Device mesh and logical-axis rules: the same code on 1 CPU, a GPU box or a TPU pod.

Parameters carry logical axis names ('vocab', 'embed', 'heads', 'kv', 'mlp', 'layers') as
nnx sharding metadata. `config.mesh.rules` maps each logical name to mesh axes ('data',
'fsdp', 'tensor'), MaxText style. A batch is split over ('data', 'fsdp') on its first axis.

Which names go where comes from a preset (posjax.mesh_rules: 'data', 'fsdp', 'fsdp_tp')
plus per-name overrides. `check_model_divisible` refuses heads / mlp / embed / head_dim sizes
that their mesh axes do not divide (ConfigError before anything compiles); a vocabulary that
does not divide (a 21128-word vocab on a 16-way axis, say) and scheme parameters are replicated
instead, and make_setup lists such fallbacks.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from posjax import schema
from posjax.errors import ConfigError, check
# logical_rules is re-exported: callers build the rules next to the mesh (sharding.make_mesh).
from posjax.mesh_rules import DEFAULT_PRESET, MESH_AXES, PRESETS, mesh_shape
from posjax.mesh_rules import logical_rules  # noqa: F401
from posjax.training.optimizer import path_str

BATCH_AXES = ("data", "fsdp")

# The rules of the default preset (what a config without mesh.preset/rules gets).
DEFAULT_RULES = PRESETS[DEFAULT_PRESET]


DCN_AXES = tuple(f"dcn_{a}" for a in MESH_AXES)


def dcn_shape(mesh_config, shape: Sequence[int]) -> tuple[int, int, int]:
    """How much of each axis spans slices / hosts over the data-center network (multi-slice).

    config.mesh.dcn_<axis> (default 1) must divide the total size of <axis>; the rest of the
    axis is inside a slice (ICI). Only 'data' (and maybe 'fsdp') should cross DCN: their
    collectives are one all-reduce / all-gather per step, tensor parallelism talks per layer.
    """
    out = []
    for name, dcn_name, size in zip(MESH_AXES, DCN_AXES, shape):
        value = schema.section_view(mesh_config, "mesh")[dcn_name]
        check(isinstance(value, int) and value >= 1 and size % value == 0, f"mesh.{dcn_name}",
              value, f"a positive int dividing mesh.{name}={size}")
        out.append(value)
    return tuple(out)


def make_mesh(mesh_config, devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
    """The ('data', 'fsdp', 'tensor') mesh; topology-aware device order where jax knows one.

    With any dcn_<axis> > 1 the devices are grouped by slice (TPU multi-slice: slice_index) or,
    where devices carry no slice index (GPU clusters, CPU tests), by process, with
    mesh_utils.create_hybrid_device_mesh; the number of groups must be the product of the
    dcn sizes.
    """
    devices = list(devices if devices is not None else jax.devices())
    shape = mesh_shape(mesh_config, len(devices))
    dcn = dcn_shape(mesh_config, shape)
    if math.prod(dcn) > 1:
        by_slice = len({getattr(d, "slice_index", 0) for d in devices}) > 1
        groups = len({getattr(d, "slice_index", 0) if by_slice else d.process_index
                      for d in devices})
        check(groups == math.prod(dcn), "mesh", dict(zip(DCN_AXES, dcn)),
              f"dcn sizes whose product equals the number of {'slices' if by_slice else 'processes'}"
              f" ({groups})")
        ici = tuple(s // d for s, d in zip(shape, dcn))
        array = mesh_utils.create_hybrid_device_mesh(
            ici, dcn, devices, process_is_granule=not by_slice, allow_split_physical_axes=True)
    elif devices[0].platform == "tpu":
        # Physical torus order: neighbours on the mesh are neighbours on the chip grid.
        array = mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
    else:
        # jax.devices() order is process-major, so 'data' (outermost) splits across hosts first.
        array = np.asarray(devices).reshape(shape)
    return Mesh(array, MESH_AXES)


# Logical axis -> the config field that sets its size (for error messages).
_SIZE_FIELDS = {"heads": "model.num_heads", "mlp": "model.mlp_dim", "embed": "model.hidden",
                "kv": "model.head_dim", "vocab": "model.vocab_size"}


def check_model_divisible(config, mesh: Mesh, rules) -> None:
    """ConfigError when a model dimension is not divisible by the mesh axes its logical name
    maps to (model.num_heads=6 under tensor=4, say), before anything is built or compiled.

    'vocab' is exempt: its size comes from the tokenizer, so an indivisible vocabulary is
    replicated instead (listed by make_setup's fallbacks).
    """
    m = schema.view(config).model
    hidden = int(m.hidden)
    heads = int(m.num_heads)
    sizes = {"heads": heads, "mlp": int(m.mlp_dim), "embed": hidden,
             "kv": int(m.head_dim or hidden // max(heads, 1))}
    emb = m.embedding_dim
    for name, size in sizes.items():
        axes = _mesh_axes_for(name, rules)
        if axes is None:
            continue
        axes_t = (axes,) if isinstance(axes, str) else tuple(axes)
        n = math.prod(mesh.shape[a] for a in axes_t)
        dims = [(_SIZE_FIELDS[name], size)]
        if name == "embed" and emb:
            dims.append(("model.embedding_dim", int(emb)))
        for field, value in dims:
            if value % n:
                raise ConfigError(field, value, f"a multiple of {'*'.join(axes_t)}={n} (logical "
                                  f"axis '{name}' -> mesh axes {axes_t}, mesh {describe(mesh)})")


def _mesh_axes_for(name, rules):
    for logical, axes in rules:
        if logical == name:
            return axes
    return None  # unknown logical names are replicated


def logical_to_mesh_spec(logical: Optional[P], shape: Sequence[int], mesh: Mesh, rules,
                         fallbacks: Optional[list] = None, path: str = "") -> P:
    """Map a logical PartitionSpec to a mesh PartitionSpec, replicating indivisible dims.

    A mesh axis is used at most once per array (first dimension wins), as jax requires.
    """
    names = tuple(logical) if logical is not None else ()
    names = names + (None,) * (len(shape) - len(names))
    used: set[str] = set()
    out = []
    for dim, name in zip(shape, names):
        axes = _mesh_axes_for(name, rules) if name is not None else None
        if axes is None:
            out.append(None)
            continue
        axes_t = (axes,) if isinstance(axes, str) else tuple(axes)
        axes_t = tuple(a for a in axes_t if a not in used and mesh.shape[a] > 1)
        size = math.prod(mesh.shape[a] for a in axes_t)
        if not axes_t:
            out.append(None)
        elif dim % size:
            if fallbacks is not None:
                fallbacks.append(f"{path}: dim {dim} ({name}) not divisible by {axes_t}={size}; replicated")
            out.append(None)
        else:
            used.update(axes_t)
            out.append(axes_t[0] if len(axes_t) == 1 else axes_t)
    return P(*out)


def tree_shardings(abstract_tree, logical_specs, mesh: Mesh, rules,
                   fallbacks: Optional[list] = None):
    """NamedShardings for a tree of arrays/ShapeDtypeStructs given logical specs of the same tree."""
    spec_leaves = jax.tree.leaves(logical_specs, is_leaf=lambda x: isinstance(x, P))
    paths_leaves = jax.tree_util.tree_flatten_with_path(abstract_tree)
    leaves, treedef = paths_leaves
    if len(spec_leaves) != len(leaves):
        raise ValueError(f"{len(spec_leaves)} specs for {len(leaves)} leaves")
    out = [
        NamedSharding(mesh, logical_to_mesh_spec(s, x.shape, mesh, rules, fallbacks, path_str(p)))
        for (p, x), s in zip(leaves, spec_leaves)
    ]
    return jax.tree.unflatten(treedef, out)


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    """First axis over ('data', 'fsdp'); the rest replicated."""
    return NamedSharding(mesh, P(BATCH_AXES, *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def check_batch_divisible(batch_size: int, mesh: Mesh) -> None:
    n = mesh.shape["data"] * mesh.shape["fsdp"]
    check(batch_size % n == 0, "data.batch_size", batch_size,
          f"a multiple of mesh data*fsdp = {n}")


def describe(mesh: Mesh) -> str:
    return " x ".join(f"{k}={v}" for k, v in mesh.shape.items())
