"""Continued training setup: a NEW workdir starts from the source params rewritten by the
method ('hierarchical', or a learned table of L rows) at the longer length; the source workdir
is never written."""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest

from posjax.errors import ConfigError
from posjax.evaluation.run import continued, restore
from posjax.evaluation import methods
from tests.evaluation.fixtures import TRAINED

# Slow tier: trains the tiny evaluation model (session fixture) and sweeps it.
pytestmark = pytest.mark.slow


def _listing(path):
    return sorted((os.path.relpath(os.path.join(r, f), path), os.path.getmtime(os.path.join(r, f)))
                  for r, _, files in os.walk(path) for f in files)


def test_new_workdir_starts_from_the_source_params(trained_workdir, tmp_path):
    source = restore.open_run(trained_workdir)
    before = _listing(trained_workdir)
    hier = methods.Variant("hierarchical", alpha=0.4)
    cfg = continued.continued_config(source, hier, 2 * TRAINED, 3)
    assert dict(cfg.position) == {"name": "hierarchical", "rows": TRAINED, "alpha": 0.4}
    assert cfg.data.seq_len == cfg.model.max_length == 2 * TRAINED
    assert cfg.train.steps == 3
    target = str(tmp_path / "continued")
    continued.prepare_workdir(source, hier, cfg, target)
    assert _listing(trained_workdir) == before  # nothing written to the source
    new = restore.open_run(target)
    assert new.step == 0 and new.scheme == "hierarchical" and new.trained_length == 2 * TRAINED
    with open(os.path.join(target, "vocab.txt")) as a, open(os.path.join(trained_workdir, "vocab.txt")) as b:
        assert a.read() == b.read()
    old, fresh = restore.load_params(source), restore.load_params(new)
    assert jax.tree.structure(old) == jax.tree.structure(fresh)
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(old), jax.tree.leaves(fresh)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=str(path))
    with pytest.raises(ConfigError, match="recovery_methods"):  # past rows**2
        continued.continued_config(source, hier, TRAINED * TRAINED + 1, 3)
    # truncate, the control: the source as it is, the same tokens in rows of T
    control = continued.continued_config(source, methods.Variant("truncate"), 2 * TRAINED, 3,
                                         batch_size=3)
    assert (control.data.seq_len, control.data.batch_size) == (TRAINED, 6)
    assert dict(control.position) == dict(source.config.position)
    with pytest.raises(ConfigError, match="continue_length"):  # not whole rows of T
        continued.continued_config(source, methods.Variant("truncate"), 2 * TRAINED + 1, 3)
    with pytest.raises(ConfigError, match="recovery_methods"):
        continued.continued_config(source, methods.Variant("tile", shuffle=True), 2 * TRAINED, 3)
    with pytest.raises(ConfigError, match="continue_length"):
        continued.continued_config(source, hier, TRAINED, 3)
    with pytest.raises(ConfigError, match="continue_workdir"):
        continued.prepare_workdir(source, hier, cfg, trained_workdir)
    # a table method: a learned table of 2T rows whose first T rows are the trained ones
    tile = continued.continued_config(source, methods.Variant("new_rows"), 2 * TRAINED, 4,
                                      checkpoint_every=2)
    assert dict(tile.position) == {"name": "learned", "rows": 2 * TRAINED}
    assert tile.train.checkpoint_every == 2 and tile.train.keep_checkpoints >= 3


def test_a_signal_during_training_stops_eval(tmp_path, monkeypatch):
    """A SIGTERM that stops a run eval.py trains (train_and_evaluate returns 'interrupted')
    stops eval.py too, naming the workdir, instead of going on to evaluate that run."""
    import ml_collections

    import posjax.training
    from posjax.evaluation import driver

    calls = []
    monkeypatch.setattr(posjax.training, "train_and_evaluate",
                        lambda cfg, wd, progress_bar=None: calls.append(wd) or
                        {"interrupted": "SIGTERM"})
    exp = ml_collections.ConfigDict({
        "workdir_root": str(tmp_path),
        "runs": {"a": {"seed": 0, "train": {"steps": 5}},
                 "b": {"seed": 0, "train": {"steps": 5}}}})
    with pytest.raises(continued.Stopped, match=r"SIGTERM stopped the training in .*a"):
        driver.train_experiment_runs(exp, progress=False)
    assert calls == [os.path.join(str(tmp_path), "a")]  # run b was not started


def test_seed_schedule_and_batch_of_a_continued_run(trained_workdir):
    source = restore.open_run(trained_workdir)
    tile = methods.Variant("tile")
    cfg = continued.continued_config(source, tile, 2 * TRAINED, 40, seed=3, batch_size=5)
    assert (cfg.seed, cfg.train.schedule, cfg.data.batch_size) == (3, "constant", 5)
    assert cfg.train.warmup_steps <= 4  # a short warmup, then the peak rate to the end
    default = continued.continued_config(source, tile, 2 * TRAINED, 40, schedule="linear")
    assert default.seed == source.config.get("seed", 0) and default.train.schedule == "linear"
    assert default.data.batch_size == max(1, source.config.data.batch_size // 2)
    for field, kw in (("continue_seeds", {"seed": -1}), ("continue_schedule", {"schedule": "x"}),
                      ("continue_batch_size", {"batch_size": 0})):
        with pytest.raises(ConfigError, match=field):
            continued.continued_config(source, tile, 2 * TRAINED, 40, **kw)
