"""Orbax round trip of a state-like tree and the data-iterator state."""

import os

import jax
import jax.numpy as jnp
import numpy as np

from posjax.training import checkpoints


def test_save_restore_round_trip(tmp_path):
    wd = str(tmp_path)
    assert checkpoints.latest_step(wd) is None
    # "depth" is a zero-size leaf (NEZHA keeps one): orbax cannot save it, posjax drops/refills it
    state = {"params": {"layers": {0: {"w": jnp.arange(6.0).reshape(2, 3), "depth": jnp.zeros((0, 4))}}},
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
    assert restored["params"]["layers"][0]["depth"].shape == (0, 4)
    _, data_bytes = ck.restore(4, abstract)
    assert data_bytes == b"\x00grain-bytes"
    ck.close()
    # no temporary directories are left behind (orbax renames them when complete)
    assert sorted(os.listdir(checkpoints.checkpoint_dir(wd))) == ["3", "4"]



