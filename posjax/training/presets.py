"""Named mesh-rule presets: how parameters, optimizer state and activations are split.

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

from posjax.errors import ConfigError

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
        raise ConfigError("mesh.preset", name, f"one of {', '.join(repr(p) for p in PRESETS)}")
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
