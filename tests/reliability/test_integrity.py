"""posjax.training.integrity on small real orbax checkpoints (no model, no compile):
each kind of damage is named, set aside (never deleted), and the newest good step is used;
with nothing usable left, one ConfigError names the checkpoint directory."""

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax.errors import ConfigError
from posjax.training import checkpoints, integrity

STATE = {"params": {"w": jnp.arange(12.0).reshape(3, 4), "b": jnp.linspace(0.0, 1.0, 5000)},
         "step": jnp.asarray(0, jnp.int32)}


def _abstract():
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), STATE)


@pytest.fixture
def workdir(tmp_path):
    ck = checkpoints.Checkpointer(str(tmp_path), every=1, keep=5, async_save=False)
    for s in (1, 2, 3):
        ck.save(s, dict(STATE, step=jnp.asarray(s, jnp.int32)), {"next_index": s}, force=True)
    ck.close()
    return str(tmp_path)


def _step_dir(wd, step):
    return os.path.join(checkpoints.checkpoint_dir(wd), str(step))


def _damage(wd, step, how):
    d = _step_dir(wd, step)
    if how == "empty":
        shutil.rmtree(d)
        os.makedirs(d)
    elif how == "no_data":
        shutil.rmtree(os.path.join(d, "data"))
    elif how == "truncated_json":
        p = os.path.join(d, "state", "_METADATA")
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) // 2)
    elif how == "zero_bytes":
        p = os.path.join(d, "state", "manifest.ocdbt")
        open(p, "w").close()


@pytest.mark.parametrize("how,expected", [
    ("empty", "the directory is empty"), ("no_data", "item 'data' is missing"),
    ("truncated_json", "state/_METADATA is unreadable"),
    ("zero_bytes", "state/manifest.ocdbt is empty (truncated)"),
])
def test_problems_named_and_set_aside(workdir, how, expected):
    assert integrity.problems(_step_dir(workdir, 3)) == []
    _damage(workdir, 3, how)
    found = integrity.problems(_step_dir(workdir, 3))
    assert any(expected in p for p in found), found
    lines = []
    assert integrity.scan(checkpoints.checkpoint_dir(workdir), lines.append) == 2
    assert len(lines) == 1 and expected in lines[0] and "moved to" in lines[0], lines
    moved = os.listdir(os.path.join(workdir, integrity.CORRUPT_DIR))
    assert len(moved) == 1 and moved[0].startswith("3-")
    assert checkpoints.latest_step(workdir) == 2


def test_restore_falls_back_past_unreadable_arrays(workdir):
    # Array data files cut in half: structurally fine, fails only when read.
    state_dir = os.path.join(_step_dir(workdir, 3), "state")
    victims = [os.path.join(r, n) for r, _, ns in os.walk(state_dir) for n in ns
               if os.path.basename(r) == "d" and "ocdbt.process" in r]
    assert victims
    for victim in victims:
        with open(victim, "r+b") as f:
            f.truncate(os.path.getsize(victim) // 2)
    _damage(workdir, 2, "empty")
    ck = checkpoints.Checkpointer(workdir, every=1, keep=5)
    lines = []
    state, data, step = integrity.restore_latest(ck, _abstract(), lines.append)
    ck.close()
    assert step == 1 and int(state["step"]) == 1 and data == {"next_index": 1}
    np.testing.assert_array_equal(state["params"]["w"], STATE["params"]["w"])
    assert len(lines) == 2 and all("is unusable" in line for line in lines), lines
    assert sorted(integrity.step_dirs(checkpoints.checkpoint_dir(workdir))) == [
        (1, _step_dir(workdir, 1))]


def test_nothing_usable_is_one_clear_error(workdir):
    for s in (1, 2, 3):
        _damage(workdir, s, "empty")
    ck = checkpoints.Checkpointer(workdir, every=1, keep=5)
    with pytest.raises(ConfigError) as e:
        integrity.restore_latest(ck, _abstract(), lambda line: None)
    ck.close()
    assert e.value.field == "checkpoint" and e.value.value == checkpoints.checkpoint_dir(workdir)
    assert integrity.CORRUPT_DIR in str(e.value)


def test_orbax_temporary_directories_are_ignored(workdir):
    # what a kill -9 in the middle of a save leaves behind
    shutil.copytree(_step_dir(workdir, 3), os.path.join(checkpoints.checkpoint_dir(workdir),
                                                        "4.orbax-checkpoint-tmp-1234"))
    assert checkpoints.latest_step(workdir) == 3
    assert [s for s, _ in integrity.step_dirs(checkpoints.checkpoint_dir(workdir))] == [3, 2, 1]
