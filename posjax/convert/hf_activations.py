"""Hugging Face activation names -> posjax model.activation, shared by every config family
(posjax.convert.hf_config, posjax.convert.modernbert) and by the way back (posjax/convert/to_hf)."""

from __future__ import annotations

from posjax.errors import ConfigError

# HF hidden_act -> posjax model.activation. gelu_new / gelu_pytorch_tanh / gelu_fast are all
# the tanh approximation 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))).
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}


def activation(hf: dict, key: str = "hidden_act") -> str:
    """posjax model.activation of the HF config field `key`; ConfigError if posjax has none."""
    act = hf.get(key, "gelu")
    if act not in ACTIVATIONS:
        raise ConfigError(f"config.json:{key}", act, f"one of {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[act]
