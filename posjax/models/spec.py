"""config.model + config.position -> a validated, hashable ModelSpec and the scheme's Dims.

Everything a wrong config can break is checked here, in plain Python, before any parameter is
made or anything is compiled, and reported as ConfigError naming the field.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from posjax import kernels, positions, schema
from posjax.attention import KERNEL_ALTERNATIVES
from posjax.errors import ConfigError, check
from posjax.models import layout


def gelu_erf(x: jax.Array) -> jax.Array:
    """BERT's exact GELU, x/2 (1 + erf(x / sqrt 2)), in the erf form BERT and torch's CPU
    kernel use. jax.nn.gelu(approximate=False) takes erfc(-x / sqrt 2) instead, which XLA:CPU
    evaluates with branches and an exp; erf is one rational polynomial, about twice as fast
    there. The price is float32 cancellation in 1 + erf for x < -4, where |gelu| < 1e-4:
    absolute error at most ~7e-7 everywhere (erfc: ~4e-7), as in torch."""
    return 0.5 * x * (1.0 + jax.lax.erf(x * np.asarray(np.sqrt(0.5), x.dtype)))


ACTIVATIONS = {
    # BERT's gelu is the exact erf form; the tanh approximation is a different function.
    "gelu": gelu_erf,
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
}
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
MIN_VOCAB = schema.MIN_VOCAB
# model.mlp: 'dense' = BERT's act(x W_i) W_o; 'glu' = (act(x W_i) * (x W_g)) W_o, the gated MLP
# of ModernBERT (GeGLU: activation 'gelu') and Llama/NomicBERT (SwiGLU: activation 'silu').
MLP_KINDS = schema.MLP_KINDS


# Model fields the spec holds after resolving them, not as checked alone: a None default filled
# (vocab_size 0 until the tokenizer is known, head_dim, embedding_dim, head_activation), the
# layer layout checked against the training length, local_position as sorted pairs (hashable).
RESOLVED = ("vocab_size", "head_dim", "embedding_dim", "head_activation", "local_window",
            "global_every", "global_first", "nope_every", "local_position")


def _spec_fields() -> list:
    """One ModelSpec field per schema model field, in the schema's order and type."""
    out = []
    for f in schema.FIELDS:
        if f.section != "model":
            continue
        kind = tuple if f.kind is dict else f.kind  # local_position: sorted (field, value) pairs
        out.append((f.key, Optional[kind] if f.default is None else kind))
    return out


def _compute_dtype(self):
    return DTYPES[self.dtype]


def _factorized(self) -> bool:
    return self.embedding_dim < self.hidden


# The static shape of a model: every field of config.model, checked and resolved, hashable so
# modules can keep it as a static attribute. Built from the schema (posjax/schema/fields.py), so
# a new model field is one line there; validate_model_config fills it.
ModelSpec = dataclasses.make_dataclass(
    "ModelSpec", _spec_fields(), frozen=True, namespace={
        "__module__": __name__,
        "__doc__": "config.model, checked and resolved: one field per schema model field.",
        "compute_dtype": property(_compute_dtype),
        "factorized": property(_factorized),
    })


def _checked(m: Any, name: str) -> Any:
    """model.<name> of the view `m`, checked by its schema declaration."""
    return schema.check_value(f"model.{name}", m[name])


_is_int = schema.is_int


def _head_dim(m: Any) -> int:
    hidden = _checked(m, "hidden")
    heads = _checked(m, "num_heads")
    head_dim = m.head_dim
    if head_dim is None:
        check(
            hidden % heads == 0,
            "model.num_heads",
            heads,
            f"a divisor of model.hidden={hidden} (or set model.head_dim)",
        )
        return hidden // heads
    return _checked(m, "head_dim")


def _head_activation(m: Any, activation: str) -> str:
    """model.head_activation (None = model.activation), checked with first_attention_norm's
    cross-field rules."""
    if not _checked(m, "first_attention_norm"):
        # Layer 0 reads the embedding norm's output directly (ModernBERT); under post-LN the
        # attention norm is the layer's output norm, and ALBERT's one shared layer is every layer.
        check(not bool(m.post_ln), "model.first_attention_norm", False,
              "True when model.post_ln=True (only a pre-LN stack can skip layer 0's input norm)")
        check(not bool(m.share_layers), "model.first_attention_norm", False,
              "True when model.share_layers=True (the one shared layer has one attention norm)")
    head_activation = activation if m.head_activation is None else m.head_activation
    return schema.check_value("model.head_activation", head_activation)


def model_dims(config: Any) -> positions.Dims:
    """The Dims the scheme is bound to for this model.

    hidden is the model width; embedding_dim is set only for ALBERT factorization (< hidden):
    ALBERT adds its position table in the embedding width before projecting to the hidden
    width, so an embed scheme's table is [rows, embedding_dim] there, like ALBERT's.
    """
    m = schema.view(config).model
    vocab = m.vocab_size
    hidden = m.hidden
    embedding_dim = m.embedding_dim
    return positions.Dims(
        num_heads=m.num_heads,
        head_dim=_head_dim(m),
        hidden=hidden,
        max_length=m.max_length,
        causal=bool(m.causal),
        vocab_size=vocab if _is_int(vocab) else 0,
        embedding_dim=embedding_dim if _is_int(embedding_dim) and embedding_dim < hidden else 0,
    )


def validate_model_config(config: Any, *, require_vocab: bool = False) -> ModelSpec:
    """Check config.model, config.position (and data.seq_len if present); return the spec.

    `vocab_size` may still be None here (train.py fills it from the tokenizer later);
    `build_model` calls this with require_vocab=True.
    """
    m = schema.view(config).model
    vocab = m.vocab_size
    if vocab is not None or require_vocab:
        check(
            _is_int(vocab) and vocab >= MIN_VOCAB,
            "model.vocab_size",
            vocab,
            f"an int >= {MIN_VOCAB} (filled from the tokenizer before building the model)",
        )
    head_dim = _head_dim(m)
    hidden = m.hidden
    num_layers = _checked(m, "num_layers")
    embedding_dim = m.embedding_dim
    if embedding_dim is None:
        embedding_dim = hidden
    check(
        _is_int(embedding_dim) and 0 < embedding_dim <= hidden,
        "model.embedding_dim",
        embedding_dim,
        f"None or an int in [1, model.hidden={hidden}] (< hidden is ALBERT factorization)",
    )
    activation = _checked(m, "activation")
    dropout = _checked(m, "dropout")
    # A key older posjax versions had (posjax.training.workdir.RETIRED_KEYS), not in the schema.
    attention_dropout = m.attention_dropout if "attention_dropout" in m else 0.0
    # attend() owns the softmax and has no dropout on the probabilities (the chunked and kernel
    # paths never materialize them). Rather than silently ignore a requested regularizer,
    # refuse it.
    check(attention_dropout in (0, 0.0, None), "model.attention_dropout", attention_dropout,
          "0.0 (attention-probability dropout is not implemented; use model.dropout)")
    max_length = _checked(m, "max_length")
    causal = _checked(m, "causal")
    sop = _checked(m, "sop")
    check(not (sop and causal), "model.sop", sop,
          "False when model.causal=True (sentence order is an encoder pretraining task)")
    head_activation = _head_activation(m, activation)
    output_classes = _checked(m, "output_classes")
    check(output_classes is None or not sop, "model.output_classes", output_classes,
          "None with model.sop (the class head replaces the MLM and SOP heads)")

    # Only a config that has a data section is checked against its training length.
    seq_len = config["data"]["seq_len"] if "data" in config and "seq_len" in config["data"] else None
    if seq_len is not None:
        check(_is_int(seq_len) and seq_len > 0, "data.seq_len", seq_len, "a positive int")
        check(
            seq_len <= max_length,
            "data.seq_len",
            seq_len,
            f"<= model.max_length={max_length}; raise model.max_length, or to run a learned "
            "table past the length it was trained at use position.name='hierarchical'",
        )

    values = {f.name: _checked(m, f.name) for f in dataclasses.fields(ModelSpec)
              if f.name not in RESOLVED}
    values.update(
        vocab_size=vocab if _is_int(vocab) else 0,
        head_dim=head_dim,
        embedding_dim=embedding_dim,
        dropout=float(dropout),
        head_activation=head_activation,
        **_layer_layout(m, num_layers, max_length if seq_len is None else seq_len),
    )
    spec = ModelSpec(**values)

    position = config["position"] if "position" in config else None
    if position is None:
        raise ConfigError("position", None, "a position config with a 'name' field")
    scheme = positions.make(position)  # unknown names/fields raise ConfigError themselves
    dims = model_dims(config)
    if not dims.vocab_size:
        # Not filled yet (train.py sets it from the tokenizer, then validates again with
        # require_vocab=True): check the scheme against the smallest legal vocabulary.
        dims = dataclasses.replace(dims, vocab_size=MIN_VOCAB)
    bound = scheme.bind(dims)  # checks the scheme against the model (dims.max_length)
    _check_pose_reach(config, bound, dims)
    # attend() refuses a window for a 2-D scheme too, but only at the first forward pass,
    # after train.py has written the workdir: refuse it here, before anything is written.
    check(spec.local_window is None or scheme.position_dims == 1, "model.local_window",
          spec.local_window, f"None for the {scheme.position_dims}-D position '{scheme.name}' "
          "(a sliding window compares 1-D positions; (row, column) pairs have no order)")
    if spec.attention == "kernel" and kernels.refusal(scheme):
        raise ConfigError("model.attention", spec.attention,
                          KERNEL_ALTERNATIVES + kernels.refusal(scheme))
    if spec.local_position:
        if bound.share_layers:
            raise ConfigError("model.local_position", dict(spec.local_position),
                              f"{{}} for position '{scheme.name}' with shared layer parameters "
                              "(its one parameter set cannot serve two schemes)")
        layout.local_scheme(bound, spec.local_position)  # unknown fields, bad values
    return spec


def _check_pose_reach(config: Any, bound: positions.Scheme, dims: positions.Dims) -> None:
    """PoSE trains at positions up to data.pose_target_length - 1 (posjax.data.pose): a scheme
    that cannot encode them (a learned table of model.max_length rows) is refused here, naming
    the PoSE field, rather than showing up as a non-finite loss at step 1."""
    reach = schema.value(config, "data.pose_target_length")
    if not schema.is_int(reach) or reach <= dims.max_length:
        return
    try:
        bound.check(dims, reach)
    except ConfigError as e:
        raise ConfigError("data.pose_target_length", reach, f"a window position "
                          f"'{bound.name}' encodes ({e.field}={e.value!r}: {e.allowed})") from None


def _layer_layout(m: Any, num_layers: int, train_length: int) -> dict:
    """The layer-layout fields of ModelSpec, checked (layout.plan) against the training
    length, the one place every bad layout fails with the field named."""
    window = m.local_window
    global_every = m.global_every
    global_first = _checked(m, "global_first")
    nope_every = m.nope_every
    layout.plan(num_layers, train_length, window=window, global_every=global_every,
                global_first=global_first, nope_every=nope_every)
    local = m.local_position
    local = {} if local is None else local
    check(hasattr(local, "items"), "model.local_position", local,
          "a dict of position fields for the local layers (e.g. {'base': 10000.0}); {} = the "
          "global layers' scheme")
    local = dict(local.items())
    check("name" not in local, "model.local_position.name", local.get("name"),
          "unset: local layers take position.name with some fields changed")
    if local:
        check(window is not None, "model.local_position", local,
              "{} while model.local_window is None (no layer is local)")
    if m.share_layers:
        check(window is None and nope_every is None, "model.share_layers", True,
              "False with model.local_window or model.nope_every (one shared layer cannot be "
              "both local and global, or with and without positions)")
    return dict(local_window=window, global_every=global_every, global_first=global_first,
                nope_every=nope_every,
                # hashable (the spec is a static attribute): lists become tuples
                local_position=tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                                            for k, v in local.items())))
