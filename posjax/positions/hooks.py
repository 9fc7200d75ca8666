"""The attention contract in types: one Protocol per hook of `Scheme` (base.py's docstring says
what each acts on, and its array layouts). A scheme's hook method takes the parameters in
the order and with the names given here; tests/positions/test_hooks.py holds every registered
scheme to them, and a type checker can too (`rotate: hooks.Rotate`).

Array = a jax array; Params = the scheme's parameter pytree (`init_embed` / `init_layer`).
"""

from __future__ import annotations

from typing import Any, Protocol

Array = Any
Params = Any


class Embed(Protocol):
    def __call__(self, params: Params, x: Array, pos: Array, ids: Array) -> Array: ...


class Rotate(Protocol):
    def __call__(self, params: Params, q: Array, k: Array, q_pos: Array,
                 k_pos: Array) -> tuple[Array, Array]: ...


class Bias(Protocol):
    def __call__(self, params: Params, q_pos: Array, k_pos: Array) -> Array: ...


class ContentLogits(Protocol):
    def __call__(self, params: Params, q: Array, k: Array, q_pos: Array,
                 k_pos: Array) -> Array: ...


class ContentFactors(Protocol):
    def __call__(self, params: Params, q: Array, k: Array, q_pos: Array,
                 k_pos: Array) -> tuple[Array, Array, Array]: ...


class ContentValues(Protocol):
    def __call__(self, params: Params, probs: Array, q_pos: Array, k_pos: Array) -> Array: ...


class Scores(Protocol):
    def __call__(self, params: Params, q: Array, k: Array, q_pos: Array,
                 k_pos: Array) -> Array: ...


class RotateValues(Protocol):
    def __call__(self, params: Params, x: Array, pos: Array, k_pos: Array,
                 inverse: bool) -> Array: ...


class LayerInput(Protocol):
    def __call__(self, params: Params, x: Array, pos: Array) -> Array: ...


class Prepare(Protocol):
    def __call__(self, params: Params, q: Array, k: Array, v: Array, q_pos: Array,
                 k_pos: Array) -> tuple[Array, Array]: ...


class TokenBias(Protocol):
    def __call__(self, params: Params, q_tok: Array, k_tok: Array, q_pos: Array,
                 k_pos: Array) -> Array: ...


class CountGates(Protocol):
    def __call__(self, params: Params, logits: Array) -> Array: ...


class CountLogits(Protocol):
    def __call__(self, params: Params, q: Array, counts: Array, q_pos: Array,
                 k_pos: Array) -> Array: ...


class LengthScale(Protocol):
    def __call__(self, params: Params, n_keys: Array) -> Array: ...


class MapLogits(Protocol):
    def __call__(self, params: Params, logits: Array, q_pos: Array, k_pos: Array) -> Array: ...


class Normalize(Protocol):
    def __call__(self, params: Params, logits: Array, mask: Array, carry: Array, q_pos: Array,
                 k_pos: Array, sides: int) -> tuple[Array, Array]: ...


class CarriedScores(Protocol):
    def __call__(self, params: Params, carry: Array, k: Array, q_tok: Array, k_tok: Array,
                 mask: Array, q_pos: Array, k_pos: Array, before: bool) -> tuple[Array, Array]: ...


class CarriedKeys(Protocol):
    def __call__(self, params: Params, k: Array, k_tok: Array) -> Array: ...


# hook name (Scheme's attribute, base.HOOKS' key) -> its Protocol
PROTOCOLS = {
    "embed": Embed, "rotate": Rotate, "bias": Bias, "content_logits": ContentLogits,
    "content_factors": ContentFactors,
    "content_values": ContentValues, "scores": Scores, "rotate_values": RotateValues,
    "layer_input": LayerInput, "prepare": Prepare, "token_bias": TokenBias,
    "count_gates": CountGates, "count_logits": CountLogits, "length_scale": LengthScale,
    "map_logits": MapLogits, "normalize": Normalize, "carried_scores": CarriedScores,
    "carried_keys": CarriedKeys,
}
