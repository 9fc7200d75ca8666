"""Mesh sizes from config.mesh and logical -> mesh PartitionSpecs (no devices needed)."""

import types

import ml_collections
import pytest
from jax.sharding import PartitionSpec as P

from posjax.errors import ConfigError
from posjax.training import sharding


def _mesh_cfg(**kw):
    return ml_collections.ConfigDict(dict(dict(data=-1, fsdp=1, tensor=1), **kw))


@pytest.mark.parametrize("cfg,n,expected", [
    (dict(), 1, (1, 1, 1)),
    (dict(), 8, (8, 1, 1)),
    (dict(data=2, fsdp=2, tensor=2), 8, (2, 2, 2)),
    (dict(data=-1, fsdp=1, tensor=2), 8, (4, 1, 2)),
    (dict(data=1, fsdp=-1, tensor=2), 8, (1, 4, 2)),
])
def test_mesh_shape(cfg, n, expected):
    assert sharding.mesh_shape(_mesh_cfg(**cfg), n) == expected


def test_mesh_product_mismatch_names_the_numbers():
    with pytest.raises(ConfigError, match=r"mesh.*2 \* 2 \* 1|= 4 must equal the device count 8"):
        sharding.mesh_shape(_mesh_cfg(data=2, fsdp=2, tensor=1), 8)
    with pytest.raises(ConfigError, match="divides the 8 devices"):
        sharding.mesh_shape(_mesh_cfg(data=-1, fsdp=3), 8)
    with pytest.raises(ConfigError, match="at most one axis"):
        sharding.mesh_shape(_mesh_cfg(data=-1, fsdp=-1), 8)
    with pytest.raises(ConfigError, match="mesh.tensor"):
        sharding.mesh_shape(_mesh_cfg(tensor=0), 8)


def _fake_mesh(data=1, fsdp=1, tensor=1):
    return types.SimpleNamespace(shape={"data": data, "fsdp": fsdp, "tensor": tensor})


def test_logical_to_mesh_spec_follows_rules():
    rules = sharding.logical_rules(ml_collections.ConfigDict({"rules": sharding.DEFAULT_RULES}))
    mesh = _fake_mesh(data=2, fsdp=2, tensor=2)
    assert sharding.logical_to_mesh_spec(P("vocab", "embed"), (8, 4), mesh, rules) == P("tensor", "fsdp")
    assert sharding.logical_to_mesh_spec(P("embed", "heads", "kv"), (4, 2, 3), mesh, rules) == P(
        "fsdp", "tensor", None)
    # a mesh axis of size 1 is dropped, so a 1x1x1 mesh replicates everything
    assert sharding.logical_to_mesh_spec(P("vocab", "embed"), (8, 4), _fake_mesh(), rules) == P(None, None)


def test_indivisible_dimension_is_replicated_and_reported():
    rules = sharding.DEFAULT_RULES
    fallbacks = []
    spec = sharding.logical_to_mesh_spec(P("vocab", "embed"), (7, 4), _fake_mesh(tensor=2, fsdp=2),
                                         rules, fallbacks, "word/embedding")
    assert spec == P(None, "fsdp")
    assert len(fallbacks) == 1 and "word/embedding" in fallbacks[0] and "7" in fallbacks[0]


def test_a_mesh_axis_is_used_once_per_array():
    rules = (("heads", "tensor"), ("mlp", "tensor"))
    assert sharding.logical_to_mesh_spec(P("heads", "mlp"), (4, 4), _fake_mesh(tensor=2), rules) == P(
        "tensor", None)


def test_rules_accept_mapping_and_reject_unknown_axes():
    rules = dict(sharding.logical_rules(ml_collections.ConfigDict({"rules": {"embed": "tensor"}})))
    assert rules["embed"] == "tensor" and rules["batch"] == ("data", "fsdp")
    with pytest.raises(ConfigError, match="mesh.rules.embed"):
        sharding.logical_rules(ml_collections.ConfigDict({"rules": {"embed": "model"}}))
