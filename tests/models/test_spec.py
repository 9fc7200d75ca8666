"""Config validation: every bad field raises ConfigError naming it, before anything is built."""

from __future__ import annotations

import pytest
from flax import nnx

from posjax import models
from posjax.errors import ConfigError
from posjax.models import pretraining

from tests.models.support import model_config


@pytest.fixture
def no_building(monkeypatch):
    """Fail the test if build_model gets as far as constructing modules."""

    def refuse(*args, **kwargs):
        raise AssertionError("modules were built before validation failed")

    monkeypatch.setattr(pretraining.MaskedLM, "__init__", refuse)
    monkeypatch.setattr(pretraining.CausalLM, "__init__", refuse)


BAD_MODEL = [
    (dict(hidden=30, num_heads=4), "model.num_heads", "divisor"),
    (dict(activation="swishy"), "model.activation", "gelu"),
    (dict(dtype="float16"), "model.dtype", "bfloat16"),
    (dict(embedding_dim=64), "model.embedding_dim", "hidden=32"),
    (dict(vocab_size=3), "model.vocab_size", ">= 5"),
    (dict(num_layers=0), "model.num_layers", "positive"),
    (dict(dropout=1.0), "model.dropout", "[0, 1)"),
    (dict(attention_dropout=0.1), "model.attention_dropout", "not implemented"),
    (dict(attention="flash"), "model.attention", "reference"),
    (dict(remat="yes"), "model.remat", "layer"),
    (dict(logn_length=1), "model.logn_length", ">= 2"),
    (dict(causal=True, sop=True), "model.sop", "causal"),
    (dict(max_length=8), "data.seq_len", "hierarchical"),  # seq_len 16 > max_length 8
    (dict(mlp="geglu"), "model.mlp", "'glu' with activation 'gelu'"),
    (dict(head_activation="tanh"), "model.head_activation", "gelu"),
    (dict(first_attention_norm=False), "model.first_attention_norm", "post_ln=True"),
    (dict(first_attention_norm=False, post_ln=False, share_layers=True),
     "model.first_attention_norm", "share_layers"),
]


@pytest.mark.parametrize("model,field,hint", BAD_MODEL)
def test_bad_model_fields(no_building, model, field, hint):
    config = model_config("learned", **model)
    with pytest.raises(ConfigError) as err:
        models.build_model(config, nnx.Rngs(0))
    assert err.value.field == field
    assert hint in str(err.value)


def test_learned_table_too_short_points_to_hierarchical(no_building):
    config = model_config({"name": "learned", "rows": 8})  # table of 8 rows, max_length 32
    with pytest.raises(ConfigError, match="hierarchical") as err:
        models.build_model(config, nnx.Rngs(0))
    assert err.value.field == "position.rows"


@pytest.mark.parametrize(
    "position,field",
    [
        ({"name": "no_such_scheme"}, "position.name"),
        ({"name": "rope", "interleave": True}, "position.interleave"),
        ({"name": "t5", "bidirectional": False}, "position.bidirectional"),  # encoder: True
        ({"name": "alibi", "dims": None}, "position.dims"),  # bound from the model, not set
    ],
)
def test_bad_position_fields(no_building, position, field):
    with pytest.raises(ConfigError) as err:
        models.build_model(model_config(position), nnx.Rngs(0))
    assert err.value.field == field


def test_vocab_may_be_unset_until_build(no_building):
    config = model_config("learned")
    config.model.vocab_size = None
    spec = models.validate_model_config(config)  # train.py calls this before the tokenizer
    assert spec.vocab_size == 0
    with pytest.raises(ConfigError) as err:
        models.build_model(config, nnx.Rngs(0))
    assert err.value.field == "model.vocab_size"


def test_model_dims():
    dims = models.model_dims(model_config("learned", causal=True))
    assert (dims.num_heads, dims.head_dim, dims.hidden) == (4, 8, 32)
    assert (dims.max_length, dims.causal, dims.vocab_size) == (32, True, 50)
    dims = models.model_dims(model_config("learned", head_dim=16))
    assert dims.head_dim == 16
    assert dims.embedding_dim == 0 and dims.embed_width == 32


def test_t5_direction_follows_the_model():
    """T5's bidirectional=None (default) is resolved from model.causal when the model binds it."""
    encoder = models.build_model(model_config("t5"), nnx.Rngs(0))
    assert encoder.scheme.bidirectional is True
    causal = models.build_model(model_config("t5", causal=True), nnx.Rngs(0))
    assert causal.scheme.bidirectional is False
