"""Bad mesh / preset / rules configs: one ConfigError naming the numbers, before any compile."""

import os
import subprocess
import sys
import types

import ml_collections
import pytest

from configs import base
from posjax.errors import ConfigError
from posjax import mesh_rules
from posjax.training import sharding
from tests.reliability import runner

# Slow tier: several processes or simulated devices (meshes).
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _fake_mesh(data=1, fsdp=1, tensor=1):
    return types.SimpleNamespace(shape={"data": data, "fsdp": fsdp, "tensor": tensor})


def _mesh_cfg(**kw):
    return ml_collections.ConfigDict(dict(dict(data=-1, fsdp=1, tensor=1), **kw))


def test_mesh_product_must_equal_the_device_count():
    with pytest.raises(ConfigError, match=r"data\*fsdp\*tensor = 4 must equal the device count 8"):
        sharding.mesh_shape(_mesh_cfg(data=2, fsdp=2, tensor=1), 8)


def test_dcn_size_must_divide_its_axis():
    with pytest.raises(ConfigError, match=r"mesh.dcn_data=3 .*dividing mesh.data=8"):
        sharding.dcn_shape(_mesh_cfg(dcn_data=3), (8, 1, 1))
    assert sharding.dcn_shape(_mesh_cfg(dcn_data=2), (8, 1, 1)) == (2, 1, 1)


@pytest.mark.parametrize("field,value,axes,mesh", [
    ("num_heads", 6, "tensor=4", dict(tensor=4)),
    ("mlp_dim", 66, "tensor=4", dict(tensor=4)),
    ("hidden", 36, "fsdp=8", dict(fsdp=8)),
])
def test_dimension_not_divisible_by_its_mesh_axis(field, value, axes, mesh):
    config = base.get_config("tiny")
    setattr(config.model, field, value)
    if field == "hidden":
        config.model.num_heads = 4  # keep head_dim whole: only the fsdp split is wrong
    rules = mesh_rules.PRESETS["fsdp_tp"]
    with pytest.raises(ConfigError, match=rf"model.{field}={value} .*multiple of {axes}"):
        sharding.check_model_divisible(config, _fake_mesh(**mesh), rules)
    # the same sizes are fine under a preset that does not split that axis
    sharding.check_model_divisible(config, _fake_mesh(**mesh), mesh_rules.PRESETS["data"])


def test_unknown_logical_axis_and_unknown_preset():
    with pytest.raises(ConfigError, match=r"mesh.rules.emebd='fsdp' .*logical axes batch, length"):
        sharding.logical_rules(_mesh_cfg(rules=(("emebd", "fsdp"),)))
    with pytest.raises(ConfigError, match=r"mesh.preset='zero3' .*'data', 'fsdp', 'fsdp_tp'"):
        sharding.logical_rules(_mesh_cfg(preset="zero3"))


def test_presets_and_overrides():
    rules = dict(sharding.logical_rules(_mesh_cfg(preset="fsdp")))
    assert rules["embed"] == "fsdp" and rules["heads"] is None and rules["batch"] == ("data", "fsdp")
    rules = sharding.logical_rules(_mesh_cfg(preset="data", rules=(("mlp", "tensor"),)))
    assert dict(rules)["mlp"] == "tensor" and dict(rules)["embed"] is None
    assert rules[0][0] == "batch"  # batch first: it claims data/fsdp before embed in activations
    # configs/base.py's default is the fsdp_tp preset
    assert dict(sharding.logical_rules(base.get_config().mesh)) == dict(mesh_rules.PRESETS["fsdp_tp"])


def test_train_py_refuses_heads_not_divisible_by_tensor(tmp_path):
    """End to end: 8 simulated devices, tensor=8 but 4 heads -> exit 2, one line, no compile."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               XLA_FLAGS=runner.xla_flags(8))
    proc = subprocess.run(
        [sys.executable, "train.py", "--config=configs/base.py:tiny", f"--workdir={tmp_path}/w",
         "--config.mesh.data=1", "--config.mesh.tensor=8", "--config.data.batch_size=8"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "model.num_heads=4" in lines[0] and "tensor=8" in lines[0], lines[0]
    assert "compiled" not in proc.stdout
