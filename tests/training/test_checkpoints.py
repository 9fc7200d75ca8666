"""Orbax round trip of a state-like tree and the data-iterator state."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from posjax import models
from posjax.errors import ConfigError
from posjax.training import checkpoints, integrity


def test_save_restore_round_trip(tmp_path):
    wd = str(tmp_path)
    assert checkpoints.latest_step(wd) is None
    state = {"params": {"layers": {0: {"w": jnp.arange(6.0).reshape(2, 3)}}},
             "step": jnp.asarray(3, jnp.int32), "rng": jax.random.PRNGKey(0)}
    ck = checkpoints.Checkpointer(wd, every=2, keep=2)
    assert ck.save(3, state, {"epoch": 1, "pos": [1, 2]}, force=True)
    ck.save(4, state, b"\x00grain-bytes", force=True)
    ck.wait()
    assert checkpoints.latest_step(wd) == 4
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                           sharding=x.sharding), state)
    restored, data_state = ck.restore(3, abstract)
    assert data_state == {"epoch": 1, "pos": [1, 2]}
    np.testing.assert_array_equal(restored["params"]["layers"][0]["w"], state["params"]["layers"][0]["w"])
    assert int(restored["step"]) == 3
    _, data_bytes = ck.restore(4, abstract)
    assert data_bytes == b"\x00grain-bytes"
    ck.close()
    # no temporary directories are left behind (orbax renames them when complete)
    assert sorted(os.listdir(checkpoints.checkpoint_dir(wd))) == ["3", "4"]


def _model_params(config, name):
    config.position = {"name": name}
    _, params, _ = nnx.split(models.build_model(config, nnx.Rngs(params=0)), nnx.Param, ...)
    return nnx.to_pure_dict(params)


def _state(params):
    return {"params": params, "opt_state": optax.adam(1e-3).init(params),
            "step": jnp.asarray(7, jnp.int32)}


@pytest.mark.parametrize("name, old_hook", [
    # What posjax wrote before schemes were bound to their dims: ALiBi / Sandwich kept their
    # constants as shared hook params (with Adam moments); NEZHA's empty [0, D] 'depth' leaf was
    # replaced by None at save time (orbax refuses zero-size arrays).
    ("alibi", {"shared_hook": {"tree": {"slopes": jnp.linspace(0.5, 0.01, 2)}}}),
    ("sandwich", {"shared_hook": {"tree": {"head_scales": jnp.ones(2), "inv_freq": jnp.ones(4)}}}),
    ("nezha", {"layers": {0: {"hook": {"tree": {"depth": None}}}}}),
])
def test_old_format_checkpoint_restores(tmp_path, tiny_config, capsys, name, old_hook):
    params = _model_params(tiny_config, name)
    old = jax.tree.map(lambda x: x, params)  # a copy with the old extra leaves added
    for key, sub in old_hook.items():
        if key == "layers":
            for i, extra in sub.items():
                old["encoder"]["layers"][i].update(extra)
        else:
            old["encoder"][key] = sub
    ck = checkpoints.Checkpointer(str(tmp_path), every=1, keep=1)
    assert ck.save(7, _state(old), {"epoch": 0}, force=True)
    ck.wait()

    new = _state(params)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                            new)
    restored, data = ck.restore(7, abstract)
    ck.close()
    assert data == {"epoch": 0}
    assert jax.tree.structure(restored) == jax.tree.structure(new)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(new)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    warned = capsys.readouterr().err
    assert ("older posjax" in warned) == (name != "nezha")  # NEZHA's None left nothing on disk


def test_unrelated_structure_mismatch_is_not_hidden(tmp_path):
    """Only the known obsolete scheme constants are dropped; any other extra leaf still fails
    the restore (integrity.restore_latest reports it) instead of being silently ignored."""
    params = {"w": jnp.ones(3)}
    ck = checkpoints.Checkpointer(str(tmp_path), every=1, keep=1)
    ck.save(1, _state({**params, "other": {"tree": {"bias": jnp.ones(2)}}}), {}, force=True)
    ck.wait()
    new = _state(params)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                            new)
    with pytest.raises(ConfigError, match="3 saved arrays this model does not have"):
        ck.restore(1, abstract)
    # a readable checkpoint of another tree is refused, never set aside as damaged
    with pytest.raises(ConfigError, match="checkpoint"):
        integrity.restore_latest(ck, abstract, write=lambda line: None)
    assert os.path.isdir(os.path.join(ck.directory, "1"))
    assert not os.path.exists(os.path.join(os.path.dirname(ck.directory), integrity.CORRUPT_DIR))
    ck.close()


def test_a_failed_save_is_reported_once_until_the_next_save(tmp_path, capsys):
    """orbax can raise one failed save's error from several later calls (wait(), close());
    the user hears it once, and a failure after a new save is a new line."""
    c = checkpoints.Checkpointer(str(tmp_path), every=1, keep=2, async_save=False)
    for _ in range(3):
        c._failed(None, FileNotFoundError("gone"))
    assert capsys.readouterr().err.count("warning: saving the last checkpoint") == 1
    assert c.save(1, {"a": jnp.ones(3)}, {"x": 1})
    c._failed(2, OSError("disk full"))
    assert capsys.readouterr().err.count("warning: saving step 2") == 1
    c.close()
