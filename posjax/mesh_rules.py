"""The mesh config without jax: axis sizes (mesh_shape) and the logical-axis rules, from named
presets of how parameters, optimizer state and activations are split (posjax.training.sharding
builds the jax Mesh from these; posjax.config.validation checks them before jax is imported).

`config.mesh.preset` picks one; `config.mesh.rules` (pairs, may be empty) overrides single
logical names on top of it. A batch is always split over ('data', 'fsdp') on its first axis.

  'data'     pure data parallelism: every device holds all parameters and optimizer state;
             only the batch is split. Simplest; fine while the model fits one device.
  'fsdp'     ZeRO-3 style: parameters and optimizer moments are sharded over 'fsdp' along
             their embedding axis and all-gathered layer by layer inside the step; the batch
             is split over data x fsdp. Memory per device falls ~1/fsdp for the state.
  'fsdp_tp'  FSDP plus Megatron tensor parallelism: heads, mlp and vocab are split over
             'tensor' (q/k/v kernels [E, H, D] -> ('fsdp', 'tensor', None)), so activations
             of attention and the MLP are split too. Use 'tensor' within a host (fast links).

Logical names are those the models put on parameters and activations; an unknown name in
config.mesh.rules is an error (a typo would otherwise silently replicate).
"""

from __future__ import annotations

import math
from typing import Any

from posjax import schema
from posjax.errors import ConfigError, check

MESH_AXES = ("data", "fsdp", "tensor")
LOGICAL_AXES = ("batch", "length", "embed", "heads", "kv", "mlp", "vocab", "layers")

_BATCH = ("batch", ("data", "fsdp"))
_NEVER_SPLIT = (("kv", None), ("length", None), ("layers", None))

PRESETS: dict[str, tuple] = {
    "data": (_BATCH, ("vocab", None), ("embed", None), ("heads", None), ("mlp", None))
    + _NEVER_SPLIT,
    "fsdp": (_BATCH, ("vocab", None), ("embed", "fsdp"), ("heads", None), ("mlp", None))
    + _NEVER_SPLIT,
    "fsdp_tp": (_BATCH, ("vocab", "tensor"), ("embed", "fsdp"), ("heads", "tensor"),
                ("mlp", "tensor")) + _NEVER_SPLIT,
}
DEFAULT_PRESET = "fsdp_tp"


def preset_rules(name: str) -> tuple:
    if name not in PRESETS:
        raise ConfigError("mesh.preset", name, schema.field("mesh.preset").allowed)
    return PRESETS[name]


def merge_rules(base: tuple, overrides: tuple) -> tuple:
    """`base` with the entries named in `overrides` replaced (order of `base` kept, so the
    batch rule stays first and claims its mesh axes before 'embed' in activations)."""
    over = dict(overrides)
    for name in over:
        if name not in LOGICAL_AXES:
            raise ConfigError(f"mesh.rules.{name}", over[name],
                              f"rules for the logical axes {', '.join(LOGICAL_AXES)}")
    merged = [(n, over.pop(n, a)) for n, a in base]
    return tuple(merged) + tuple(over.items())


def mesh_shape(mesh_config, num_devices: int) -> tuple[int, int, int]:
    """Resolve data/fsdp/tensor sizes (-1 = the rest); the product must be num_devices."""
    mesh = schema.section_view(mesh_config, "mesh")
    sizes = [schema.check_value(f"mesh.{name}", mesh[name]) for name in MESH_AXES]
    free = [i for i, s in enumerate(sizes) if s == -1]
    check(len(free) <= 1, "mesh", dict(zip(MESH_AXES, sizes)), "at most one axis set to -1")
    fixed = math.prod(s for s in sizes if s != -1)
    if free:
        check(num_devices % fixed == 0, "mesh", dict(zip(MESH_AXES, sizes)),
              f"sizes whose product divides the {num_devices} devices (fixed axes give {fixed})")
        sizes[free[0]] = num_devices // fixed
    product = math.prod(sizes)
    if product != num_devices:
        raise ConfigError(
            "mesh", dict(zip(MESH_AXES, sizes)),
            f"data*fsdp*tensor = {product} must equal the device count {num_devices}")
    return tuple(sizes)


def logical_rules(mesh_config) -> tuple[tuple[str, Any], ...]:
    """The rules of config.mesh.preset (default 'fsdp_tp') with config.mesh.rules on top.

    config.mesh.rules: a mapping or (logical, mesh axes) pairs; each replaces the preset's
    entry for that logical name. Mesh axes must be names from MESH_AXES (or None).
    """

    mesh = schema.section_view(mesh_config, "mesh")
    base = preset_rules(mesh.preset if mesh.preset is not None else DEFAULT_PRESET)
    raw = mesh.rules
    if raw is None:
        return base
    items = list(raw.items()) if hasattr(raw, "items") else list(raw)
    rules = []
    for item in items:
        try:
            name, axes = item
        except (TypeError, ValueError):
            raise ConfigError("mesh.rules", item, "(logical_name, mesh axes) pairs") from None
        if isinstance(axes, (list, tuple)):
            axes = tuple(axes)
            bad = [a for a in axes if a not in MESH_AXES]
        else:
            bad = [] if axes is None or axes in MESH_AXES else [axes]
        if bad:
            raise ConfigError(f"mesh.rules.{name}", axes, f"None or names from {MESH_AXES}")
        rules.append((name, axes))
    return merge_rules(base, tuple(rules))
