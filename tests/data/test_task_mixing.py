"""config.data.tasks in the training pipeline: the asked fraction of rows are task rows,
the same for a given (seed, row index) (so resuming replays them), in the batch contract;
bad settings are one-line ConfigErrors."""

from __future__ import annotations

import numpy as np
import pytest

from posjax import data
from posjax.config import defaults
from posjax.data import pipeline
from posjax.data.tasks import common, mixing
from posjax.errors import ConfigError
from posjax.config.validation import validate

FRACTIONS = {"passkey": 0.5, "copy_span": 0.25}


def test_mixer_fractions_and_determinism(make_config, chars):
    config = make_config(seq_len=32, tasks=dict(FRACTIONS))
    tokens = pipeline.tokenized(config, chars, "train").tokens
    mix = mixing.make_mixer(config, chars, tokens, seed=3)
    rows = [mix(i) for i in range(600)]
    picked = [r for r in rows if r is not None]
    assert abs(len(picked) / 600 - 0.75) < 0.07
    prefix = np.array(common.task_vocab(chars).prefix)
    passkey = [r for r in picked if any(np.array_equal(r["input_ids"][i:i + prefix.size], prefix)
                                        for i in range(32 - prefix.size))]
    assert abs(len(passkey) / 600 - 0.5) < 0.07
    for r in picked:
        assert r["input_ids"].shape == (32,) and (r["mlm_weights"] > 0).sum() == 5
        assert r["input_ids"][0] == chars.cls_id and r["input_ids"][-1] == chars.sep_id
    again = mixing.make_mixer(config, chars, tokens, seed=3)
    for i in (0, 17, 599):
        a, b = rows[i], again(i)
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
    assert mixing.make_mixer(make_config(seq_len=32), chars, tokens, seed=3) is None


def test_pipeline_rows_are_the_mixers(make_config, chars):
    config = make_config(seq_len=32, batch_size=8, tasks=dict(FRACTIONS))
    mix = mixing.make_mixer(config, chars, pipeline.tokenized(config, chars, "train").tokens, 0)
    it = data.make_train_iterator(config, chars, seed=0)
    found = 0
    for b in range(4):
        batch = next(it)
        for j in range(8):
            want = mix(b * 8 + j)
            if want is not None:
                found += 1
                for k, v in want.items():
                    np.testing.assert_array_equal(batch[k][j], v, err_msg=k)
    assert found > 0


@pytest.mark.parametrize("fields, field", [
    ({"tasks": {"passkey": 0.6, "needle": 0.6}}, "data.tasks"),
    ({"tasks": {"longdoc": 0.1}}, "data.tasks"),
    ({"tasks": {"passkey": 1.5}}, "data.tasks.passkey"),
    ({"tasks": {"passkey": 0.2}, "task_digits": 9}, "data.task_digits"),  # > 5 scored at 32
    ({"tasks": {"passkey": 0.2}, "seq_len": 12, "task_digits": 2}, "data.seq_len"),
])
def test_bad_mixing_config(make_config, chars, fields, field):
    config = make_config(**{"seq_len": 32, **fields})
    with pytest.raises(ConfigError) as e:
        mixing.check(config, common.task_vocab(chars))
    assert e.value.field == field and "\n" not in str(e.value)


def test_validate_checks_tasks():
    config = defaults.get_config("tiny")
    config.data.tasks = {"passkey": 0.7, "copy_span": 0.5}
    with pytest.raises(ConfigError) as e:
        validate(config)
    assert e.value.field == "data.tasks" and "sum" in str(e.value)
    config.data.tasks = {"passkey": 0.2}
    config.model.causal = True
    with pytest.raises(ConfigError) as e:
        validate(config)
    assert e.value.field == "data.tasks"
