"""Which layers are local (sliding window) or global, and which carry no positions.

ModernBERT alternates sliding-window local layers with global ones (global every 3rd layer,
starting with layer 0: `layer_id % global_attn_every_n_layers == 0`); Gemma-style stacks put
the global layer last in each group; Llama 4 (iRoPE) drops RoPE on every 4th layer
(`(layer_idx + 1) % 4 == 0`). `plan` turns those settings into one LayerKind per layer and
checks them before anything is built.

The Encoder builds one layer per kind: `kind.window` goes to `attend(window=...)`, and each
layer gets its kind's bound scheme (`layer_scheme`): the model's scheme on global layers, the
same scheme with `model.local_position` overrides on local ones (ModernBERT: RoPE base 160k
global, 10k local), and no attention hooks at all on NoPE layers.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import ml_collections
from posjax import schema

from posjax.errors import ConfigError
from posjax.positions import BOUND_FIELDS, Scheme

NO_POSITIONS = Scheme()  # a NoPE layer: plain scaled dot-product attention


@dataclasses.dataclass(frozen=True)
class LayerKind:
    window: Optional[int]  # None = global attention; else the sliding-window width
    positions: bool = True  # False = NoPE layer (no rotate/bias hooks)

    @property
    def local(self) -> bool:
        return self.window is not None


def plan(num_layers: int, train_length: int, *, window: Optional[int] = None,
         global_every: int = 1, global_first: bool = True,
         nope_every: Optional[int] = None) -> tuple[LayerKind, ...]:
    """One LayerKind per layer.

    window        local layers' window in tokens (None: every layer global)
    global_every  k: every k-th layer is global, the others local
    global_first  True: layers 0, k, 2k, ... are global (ModernBERT); False: k-1, 2k-1, ...
    nope_every    m: layers m-1, 2m-1, ... carry no positions (iRoPE); None: all do
    """
    schema.check_value("model.local_window", window)
    schema.check_value("model.global_every", global_every)
    schema.check_value("model.nope_every", nope_every)
    if window is not None and window > train_length:
        raise ConfigError("model.local_window", window,
                          f"<= the training length {train_length} (a wider window is a "
                          "global layer)")

    def is_global(i: int) -> bool:
        return window is None or (i if global_first else i + 1) % global_every == 0

    kinds = tuple(
        LayerKind(None if is_global(i) else window,
                  positions=nope_every is None or (i + 1) % nope_every != 0)
        for i in range(num_layers))
    if not any(not k.local for k in kinds):
        raise ConfigError("model.global_every", global_every,
                          f"a pattern with at least one global layer among {num_layers} "
                          f"(global_first={global_first} puts the first at layer "
                          f"{0 if global_first else global_every - 1})")
    return kinds


def local_scheme(scheme: Scheme, overrides: tuple) -> Scheme:
    """The bound `scheme` with the (field, value) `overrides` of model.local_position, bound
    to the same dims; ConfigError naming the field for one the scheme does not have."""
    if not overrides:
        return scheme
    fields = {f.name for f in dataclasses.fields(scheme)} - {"dims", *BOUND_FIELDS}
    for key, value in overrides:
        if key not in fields:
            raise ConfigError(f"model.local_position.{key}", value,
                              f"a field of position '{scheme.name}': "
                              f"{', '.join(sorted(fields)) or '(none)'}")
    return dataclasses.replace(scheme, dims=None, **dict(overrides)).bind(scheme.dims)


def layer_scheme(kind: LayerKind, scheme: Scheme, local: Scheme) -> Scheme:
    """The scheme a layer of this kind attends with: none on a NoPE layer, `local` on a local
    layer, else the model's `scheme` (all bound)."""
    if not kind.positions:
        return NO_POSITIONS
    return local if kind.local else scheme


def keep_local_rotation(model_config) -> bool:
    """Make a RoPE scaling set on `config.position` apply to the global layers only: local
    layers inherit position's fields, but a local layer never sees a distance past its window
    (<= the training length, `plan`), so it has nothing to extend (transformers' Gemma 3 does
    the same). Edits `model_config.local_position` in place; True when the model has local
    layers. Shared by eval.py's methods and Pretrained.extend so both extend alike."""
    m = schema.section_view(model_config, "model")
    if m.local_window is None:
        return False
    local = dict(m.local_position or {})
    local.update(scaling="none", factor=1.0)
    model_config.local_position = ml_collections.ConfigDict(local)
    return True
