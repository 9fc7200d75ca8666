"""Training on an algorithmic task end to end: configs/algorithmic.py's tiny variant through
the train step (one compile per bucket) and through train.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import optax
import pytest

from configs import algorithmic as algorithmic_config
from configs.experiments import algorithmic as grid
from posjax import data, models
from posjax.data import curriculum, tape
from posjax.errors import ConfigError
from posjax.config.validation import validate
from posjax.training import sharding, state as state_lib
from posjax.training.loop import train_and_evaluate
from posjax.training.optimizer import make_optimizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(arg="reverse_string,rope,tiny"):
    config = algorithmic_config.get_config(arg)
    config.model.vocab_size = tape.FIRST_SYMBOL + curriculum.task_of(config).input_size + 1
    return config


def test_the_config_is_the_reference_setup():
    c = algorithmic_config.get_config("reverse_string,rope")
    m, d, t = c.model, c.data, c.train
    assert (m.num_layers, m.hidden, m.num_heads, m.mlp_dim) == (5, 64, 8, 256)
    assert (m.activation, m.post_ln, m.dropout, m.attention_bias) == ("relu", True, 0.1, False)
    assert (m.embedding_style, m.output_classes, m.type_vocab_size) == ("scaled", 2, 0)
    assert (d.batch_size, d.max_input_length, d.seq_len) == (128, 40, 80)
    assert (t.learning_rate, t.clip_norm, t.weight_decay, t.warmup_steps) == (1e-3, 1.0, 0.0, 0)
    assert c.position.interleaved is True and d.randomized_max_length is None
    r = algorithmic_config.get_config("duplicate_string,xl,randomized")
    assert r.data.seq_len == 128 and r.data.randomized_max_length == 2048
    assert r.data.randomized_eval is True and r.position.name == "xl"
    assert algorithmic_config.get_config("odds_first,xpos").model.causal is True
    assert r.model.causal is False


@pytest.mark.parametrize("arg,field", [("no_such_task", "data.task"),
                                       ("reverse_string,no_scheme", "config variant"),
                                       ("reverse_string,rope2d", "config variant")])
def test_a_bad_argument_names_what_is_allowed(arg, field):
    with pytest.raises(ConfigError, match=field):
        algorithmic_config.get_config(arg)


def test_the_optimizer_is_plain_adam_with_clipping():
    """No leaf gets weight decay or LAMB's trust ratio: the update is optax.adam's."""
    config = _config()
    params = {"a": {"kernel": np.ones((3, 2), np.float32) * 2.0}, "norm": {"scale": np.ones(2)}}
    grads = jax.tree.map(lambda p: np.full(p.shape, 0.1, np.float32), params)
    tx, _ = make_optimizer(config.train, params)
    ref = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3, eps=1e-8))
    u, _ = tx.update(grads, tx.init(params), params)
    v, _ = ref.update(grads, ref.init(params), params)
    for a, b in zip(jax.tree.leaves(u), jax.tree.leaves(v)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.slow
def test_the_curriculum_compiles_the_train_step_once_per_bucket():
    config = _config()
    mesh = sharding.make_mesh(config.mesh)
    rules = sharding.logical_rules(config.mesh)
    setup = state_lib.make_setup(config, mesh, rules, models.build_model, make_optimizer)
    state = setup.init_fn()
    it = data.make_train_iterator(config, None, 0)
    batches = [next(it) for _ in range(12)]
    shapes = {b["input_ids"].shape for b in batches}
    # reverse_string at n <= 6: tapes of 2..12 places in buckets of 4 -> 4, 8, 12
    assert len(shapes) >= 2 and all(s[1] in (4, 8, 12) for s in shapes)
    step = state_lib.make_train_step(setup, config, state_lib.batch_shardings(batches[0], mesh))
    losses = []
    for b in batches:
        state, metrics = step(state, jax.device_put(b))
        losses.append(float(metrics["loss"]))
    assert step._cache_size() == len(shapes)
    assert np.isfinite(losses).all()


def test_train_and_evaluate_two_steps_of_one_bucket(tmp_path):
    """The fast in-process run: one bucket (tapes of 2..4 places), one compile."""
    config = algorithmic_config.get_config("parity_check,none,tiny")
    config.data.max_input_length = 3
    config.model.num_layers = 1
    config.train.steps, config.train.eval_every, config.train.checkpoint_every = 2, 0, 2
    summary = train_and_evaluate(config, str(tmp_path), progress_bar=False)
    assert summary["step"] == 2 and np.isfinite(summary["last_loss"])
    assert (tmp_path / "vocab.txt").read_text().split() == [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[S0]", "[S1]", "[EMPTY]"]


@pytest.mark.slow
def test_train_and_evaluate_runs_and_resumes_on_an_algorithmic_task(tmp_path):
    config = algorithmic_config.get_config("parity_check,alibi,randomized,tiny")
    summary = train_and_evaluate(config, str(tmp_path), progress_bar=False)
    assert summary["step"] == 6 and np.isfinite(summary["last_loss"])
    assert 0.0 <= summary["eval"]["mlm_accuracy"] <= 1.0
    config = algorithmic_config.get_config("parity_check,alibi,randomized,tiny")
    config.train.steps = 8
    again = train_and_evaluate(config, str(tmp_path), progress_bar=False)
    assert again["start_step"] == 6 and again["step"] == 8


@pytest.mark.slow
def test_train_py_on_an_algorithmic_task(tmp_path):
    workdir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "train.py", "--config=configs/algorithmic.py:reverse_string,rope,tiny",
         f"--workdir={workdir}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "done: step 6" in out.stdout
    lines = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["step"] == 6 and np.isfinite(lines[-1]["loss"])
    bad = subprocess.run(
        [sys.executable, "train.py", "--config=configs/algorithmic.py:reverse_string,rope,tiny",
         f"--workdir={tmp_path / 'bad'}", "--config.model.output_classes=3"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "model.output_classes" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_the_grid_holds_the_core_and_the_papers_encodings_plain_and_randomized():
    core = grid.get_config("core").runs
    assert len(core) == 3 * 2 * 2 * 3
    assert core.reverse_string_xl_randomized_seed2.data.randomized_max_length == 2048
    assert core.reverse_string_xl.data.randomized_max_length is None
    full = grid.get_config(None).runs
    assert set(core) <= set(full) and len(full) == 8 * (6 * 2 - 1) * 3
    assert "parity_check_none" in full and "parity_check_none_randomized" not in full
    assert {c.position.name for c in full.values()} == set(grid.SCHEMES)


def test_no_argument_is_reverse_string_with_rope():
    config = algorithmic_config.get_config(None)
    assert (config.data.task, config.position.name) == ("reverse_string", "rope")
    assert algorithmic_config.get_config("").data.task == "reverse_string"
    assert algorithmic_config.get_config("tiny").data.batch_size == 8
    assert algorithmic_config.get_config("base").to_dict() == config.to_dict()


def test_randomized_positions_inside_attention_draw_per_layer_as_the_reference():
    # the reference's noisy rotary / relative / ALiBi draw in every layer, sin/cos once
    assert algorithmic_config.get_config("reverse_string,rope,randomized").data.randomized_layers
    assert algorithmic_config.get_config("reverse_string,xl,randomized").data.randomized_layers
    config = algorithmic_config.get_config("reverse_string,sinusoidal,randomized")
    assert not config.data.randomized_layers
    validate(algorithmic_config.get_config("reverse_string,rope,randomized"))
    bad = algorithmic_config.get_config("reverse_string,rope")
    bad.data.randomized_layers = True  # without randomized_max_length: nothing to draw
    with pytest.raises(ConfigError, match="data.randomized_layers"):
        validate(bad)
