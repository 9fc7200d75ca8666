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

from posjax import kernels, positions
from posjax.attention import IMPLEMENTATIONS, KERNEL_ALTERNATIVES
from posjax.errors import ConfigError, check
from posjax.models import layout, remat as remat_choices


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
MIN_VOCAB = 5  # the special tokens alone: [PAD] [UNK] [CLS] [SEP] [MASK]
# model.mlp: 'dense' = BERT's act(x W_i) W_o; 'glu' = (act(x W_i) * (x W_g)) W_o, the gated MLP
# of ModernBERT (GeGLU: activation 'gelu') and Llama/NomicBERT (SwiGLU: activation 'silu').
MLP_KINDS = ("dense", "glu")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """The static shape of a model: hashable, so modules can keep it as a static attribute."""

    vocab_size: int
    hidden: int
    num_layers: int
    num_heads: int
    head_dim: int
    mlp_dim: int
    embedding_dim: int
    share_layers: bool
    post_ln: bool
    causal: bool
    type_vocab_size: int
    dropout: float
    activation: str
    dtype: str
    max_length: int
    attention: str
    block_q: int
    block_k: int
    logn_length: Optional[int]
    sop: bool
    layer_norm_eps: float
    # Modern-encoder options (ModernBERT, NomicBERT); the defaults are BERT's.
    mlp: str = "dense"
    norm_bias: bool = True  # every LayerNorm has a bias (ModernBERT: none)
    attention_bias: bool = True  # query/key/value/output projections
    mlp_bias: bool = True
    head_bias: bool = True  # the MLM head's transform
    head_activation: str = "gelu"  # the MLM head's activation (ModernBERT classifier_activation)
    first_attention_norm: bool = True  # False: layer 0 has no attention norm (ModernBERT)
    # Layer layout (layout.plan) and learned attention sinks; the defaults are the plain stack.
    local_window: Optional[int] = None
    global_every: int = 1
    global_first: bool = True
    nope_every: Optional[int] = None
    local_position: tuple = ()  # sorted (field, value) pairs: the local layers' scheme overrides
    attention_sinks: bool = False
    remat: str = "none"  # per-layer rematerialization (models/remat.py)

    @property
    def compute_dtype(self):
        return DTYPES[self.dtype]

    @property
    def factorized(self) -> bool:
        return self.embedding_dim < self.hidden


def _get(cfg: Any, name: str, default=None):
    """Field of a ConfigDict or dict, with a default for optional fields."""
    try:
        value = cfg[name]
    except (KeyError, AttributeError):
        return default
    return default if value is None and default is not None else value


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _positive_int(value, field: str) -> int:
    check(_is_int(value) and value > 0, field, value, "a positive int")
    return value


def _head_dim(m: Any) -> int:
    hidden = _positive_int(_get(m, "hidden"), "model.hidden")
    heads = _positive_int(_get(m, "num_heads"), "model.num_heads")
    head_dim = _get(m, "head_dim")
    if head_dim is None:
        check(
            hidden % heads == 0,
            "model.num_heads",
            heads,
            f"a divisor of model.hidden={hidden} (or set model.head_dim)",
        )
        return hidden // heads
    return _positive_int(head_dim, "model.head_dim")


def _modern_fields(m: Any, activation: str) -> dict:
    """model.mlp, the bias flags, head_activation and first_attention_norm, checked."""
    mlp = _get(m, "mlp", "dense")
    check(mlp in MLP_KINDS, "model.mlp", mlp,
          f"one of {', '.join(MLP_KINDS)} ('glu' with activation 'gelu' is GeGLU, 'silu' SwiGLU)")
    out = {"mlp": mlp}
    for name in ("norm_bias", "attention_bias", "mlp_bias", "head_bias", "first_attention_norm"):
        value = _get(m, name, True)
        check(isinstance(value, bool), f"model.{name}", value, "True or False")
        out[name] = value
    head_activation = _get(m, "head_activation", activation)
    check(head_activation in ACTIVATIONS, "model.head_activation", head_activation,
          f"None (= model.activation) or one of {', '.join(ACTIVATIONS)}")
    out["head_activation"] = head_activation
    if not out["first_attention_norm"]:
        # Layer 0 reads the embedding norm's output directly (ModernBERT); under post-LN the
        # attention norm is the layer's output norm, and ALBERT's one shared layer is every layer.
        check(not bool(_get(m, "post_ln", True)), "model.first_attention_norm", False,
              "True when model.post_ln=True (only a pre-LN stack can skip layer 0's input norm)")
        check(not bool(_get(m, "share_layers", False)), "model.first_attention_norm", False,
              "True when model.share_layers=True (the one shared layer has one attention norm)")
    return out


def model_dims(config: Any) -> positions.Dims:
    """The Dims the scheme is bound to for this model.

    hidden is the model width; embedding_dim is set only for ALBERT factorization (< hidden):
    ALBERT adds its position table in the embedding width before projecting to the hidden
    width, so an embed scheme's table is [rows, embedding_dim] there, like ALBERT's.
    """
    m = config.model
    vocab = _get(m, "vocab_size")
    hidden = _get(m, "hidden")
    embedding_dim = _get(m, "embedding_dim")
    return positions.Dims(
        num_heads=_get(m, "num_heads"),
        head_dim=_head_dim(m),
        hidden=hidden,
        max_length=_get(m, "max_length"),
        causal=bool(_get(m, "causal", False)),
        vocab_size=vocab if _is_int(vocab) else 0,
        embedding_dim=embedding_dim if _is_int(embedding_dim) and embedding_dim < hidden else 0,
    )


def validate_model_config(config: Any, *, require_vocab: bool = False) -> ModelSpec:
    """Check config.model, config.position (and data.seq_len if present); return the spec.

    `vocab_size` may still be None here (train.py fills it from the tokenizer later);
    `build_model` calls this with require_vocab=True.
    """
    m = config.model
    vocab = _get(m, "vocab_size")
    if vocab is not None or require_vocab:
        check(
            _is_int(vocab) and vocab >= MIN_VOCAB,
            "model.vocab_size",
            vocab,
            f"an int >= {MIN_VOCAB} (filled from the tokenizer before building the model)",
        )
    head_dim = _head_dim(m)
    hidden = m.hidden
    num_layers = _positive_int(_get(m, "num_layers"), "model.num_layers")
    mlp_dim = _positive_int(_get(m, "mlp_dim"), "model.mlp_dim")
    embedding_dim = _get(m, "embedding_dim")
    if embedding_dim is None:
        embedding_dim = hidden
    check(
        _is_int(embedding_dim) and 0 < embedding_dim <= hidden,
        "model.embedding_dim",
        embedding_dim,
        f"None or an int in [1, model.hidden={hidden}] (< hidden is ALBERT factorization)",
    )
    activation = _get(m, "activation", "gelu")
    check(activation in ACTIVATIONS, "model.activation", activation,
          f"one of {', '.join(ACTIVATIONS)}")
    dtype = _get(m, "dtype", "float32")
    check(dtype in DTYPES, "model.dtype", dtype, f"one of {', '.join(DTYPES)}")
    dropout = _get(m, "dropout", 0.0)
    check(isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0,
          "model.dropout", dropout, "a float in [0, 1)")
    attention_dropout = _get(m, "attention_dropout", 0.0)
    # attend() owns the softmax and has no dropout on the probabilities (the chunked and kernel
    # paths never materialize them). Rather than silently ignore a requested regularizer,
    # refuse it.
    check(attention_dropout in (0, 0.0, None), "model.attention_dropout", attention_dropout,
          "0.0 (attention-probability dropout is not implemented; use model.dropout)")
    type_vocab = _get(m, "type_vocab_size", 2)
    check(_is_int(type_vocab) and type_vocab >= 0, "model.type_vocab_size", type_vocab,
          "an int >= 0 (0 = no token type embeddings)")
    max_length = _positive_int(_get(m, "max_length"), "model.max_length")
    attention = _get(m, "attention", "auto")
    check(attention in IMPLEMENTATIONS, "model.attention", attention,
          f"one of {', '.join(IMPLEMENTATIONS)}")
    block_q = _positive_int(_get(m, "block_q", 128), "model.block_q")
    block_k = _positive_int(_get(m, "block_k", 128), "model.block_k")
    logn_length = _get(m, "logn_length")
    check(logn_length is None or (_is_int(logn_length) and logn_length >= 2),
          "model.logn_length", logn_length, "None or an int >= 2 (the training length)")
    causal = _get(m, "causal", False)
    check(isinstance(causal, bool), "model.causal", causal, "True or False")
    sop = _get(m, "sop", False)
    check(isinstance(sop, bool), "model.sop", sop, "True or False")
    check(not (sop and causal), "model.sop", sop,
          "False when model.causal=True (sentence order is an encoder pretraining task)")
    eps = _get(m, "layer_norm_eps", 1e-12)
    check(isinstance(eps, float) and eps > 0, "model.layer_norm_eps", eps, "a float > 0")
    modern = _modern_fields(m, activation)
    sinks = _get(m, "attention_sinks", False)
    check(isinstance(sinks, bool), "model.attention_sinks", sinks, "True or False")
    remat = _get(m, "remat", "none")
    check(remat in remat_choices.CHOICES, "model.remat", remat,
          f"one of {', '.join(remat_choices.CHOICES)} (per-layer rematerialization)")

    data = _get(config, "data")
    seq_len = _get(data, "seq_len") if data is not None else None
    if seq_len is not None:
        check(_is_int(seq_len) and seq_len > 0, "data.seq_len", seq_len, "a positive int")
        check(
            seq_len <= max_length,
            "data.seq_len",
            seq_len,
            f"<= model.max_length={max_length}; raise model.max_length, or to run a learned "
            "table past the length it was trained at use position.name='hierarchical'",
        )

    spec = ModelSpec(
        vocab_size=vocab if _is_int(vocab) else 0,
        hidden=hidden,
        num_layers=num_layers,
        num_heads=m.num_heads,
        head_dim=head_dim,
        mlp_dim=mlp_dim,
        embedding_dim=embedding_dim,
        share_layers=bool(_get(m, "share_layers", False)),
        post_ln=bool(_get(m, "post_ln", True)),
        causal=causal,
        type_vocab_size=type_vocab,
        dropout=float(dropout),
        activation=activation,
        dtype=dtype,
        max_length=max_length,
        attention=attention,
        block_q=block_q,
        block_k=block_k,
        logn_length=logn_length,
        sop=sop,
        layer_norm_eps=eps,
        **modern,
        attention_sinks=sinks,
        remat=remat,
        **_layer_layout(m, num_layers, max_length if seq_len is None else seq_len),
    )

    position = _get(config, "position")
    if position is None:
        raise ConfigError("position", None, "a position config with a 'name' field")
    scheme = positions.make(position)  # unknown names/fields raise ConfigError themselves
    dims = model_dims(config)
    if not dims.vocab_size:
        # Not filled yet (train.py sets it from the tokenizer, then validates again with
        # require_vocab=True): check the scheme against the smallest legal vocabulary.
        dims = dataclasses.replace(dims, vocab_size=MIN_VOCAB)
    bound = scheme.bind(dims)  # checks the scheme against the model (dims.max_length)
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


def _layer_layout(m: Any, num_layers: int, train_length: int) -> dict:
    """The layer-layout fields of ModelSpec, checked (layout.plan) against the training
    length, the one place every bad layout fails with the field named."""
    window = _get(m, "local_window")
    global_every = _get(m, "global_every", 1)
    global_first = _get(m, "global_first", True)
    check(isinstance(global_first, bool), "model.global_first", global_first, "True or False")
    nope_every = _get(m, "nope_every")
    layout.plan(num_layers, train_length, window=window, global_every=global_every,
                global_first=global_first, nope_every=nope_every)
    local = _get(m, "local_position", None)
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
    if _get(m, "share_layers", False):
        check(window is None and nope_every is None, "model.share_layers", True,
              "False with model.local_window or model.nope_every (one shared layer cannot be "
              "both local and global, or with and without positions)")
    return dict(local_window=window, global_every=global_every, global_first=global_first,
                nope_every=nope_every,
                # hashable (the spec is a static attribute): lists become tuples
                local_position=tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                                            for k, v in local.items())))
