"""scheme.bind(dims): the bound scheme carries its dims, binding checks them, bound fields
cannot come from a config, and the embed width follows ALBERT factorization."""

import dataclasses

import jax
import pytest

from posjax.errors import ConfigError
from posjax.positions import BOUND_FIELDS, Dims, make, names

DIMS = Dims(num_heads=4, head_dim=8, hidden=32, max_length=64, vocab_size=20)


def test_bind_carries_dims_and_is_hashable():
    scheme = make("alibi")
    bound = scheme.bind(DIMS)
    assert scheme.dims is None and bound.dims == DIMS
    assert bound.bind(DIMS) is bound  # binding again to the same dims is a no-op
    assert bound != scheme and hash(bound) != hash(scheme)  # jit caches tell them apart
    with pytest.raises(ValueError, match="bound to"):
        bound.bind(dataclasses.replace(DIMS, num_heads=2))


def test_bind_checks_the_dims():
    with pytest.raises(ConfigError, match="model.causal"):
        make("xpos").bind(DIMS)  # causal-only scheme in a bidirectional model
    with pytest.raises(ConfigError, match="position.rows"):
        make("learned", rows=8).bind(DIMS)  # 8 rows cannot reach max_length 64


@pytest.mark.parametrize("field", BOUND_FIELDS)
def test_bound_fields_cannot_be_set_from_a_config(field):
    for name in names():
        with pytest.raises(ConfigError, match=f"position.{field}") as err:
            make({"name": name, field: DIMS})
        assert "bound from the model" in str(err.value)


def test_embed_width_is_the_factorized_width():
    assert DIMS.embed_width == 32 and DIMS.embed_field == "model.hidden"
    albert = dataclasses.replace(DIMS, embedding_dim=16)
    assert albert.embed_width == 16 and albert.embed_field == "model.embedding_dim"
    table = make("learned").bind(albert).init_embed(jax.random.key(0))["table"]
    assert table.shape == (64, 16)
    with pytest.raises(ConfigError, match="model.embedding_dim"):
        make("sinusoidal").bind(dataclasses.replace(DIMS, embedding_dim=15))
