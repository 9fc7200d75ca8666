"""Workdir rules: fresh, resume with a config check, refuse foreign or unwritable dirs."""

import os

import pytest

from posjax.errors import ConfigError
from posjax.training import workdir


def test_fresh_then_matching_then_mismatch(tmp_path, tiny_config):
    wd = str(tmp_path / "run")
    assert workdir.apply_rules(tiny_config, wd) is None  # created, fresh
    workdir.save_config(tiny_config, wd)
    assert workdir.apply_rules(tiny_config, wd) is None  # ours, no checkpoint yet: restart at 0
    tiny_config.train.steps = 999  # training fields may change on resume
    assert workdir.apply_rules(tiny_config, wd) is None
    tiny_config.position.name = "sinusoidal"
    with pytest.raises(ConfigError, match=r"^position.name='sinusoidal'.*'learned'"):
        workdir.apply_rules(tiny_config, wd)


def test_tokenizer_field_is_pinned(tmp_path, tiny_config):
    wd = str(tmp_path)
    workdir.save_config(tiny_config, wd)
    tiny_config.data.tokenizer = "wordpiece"
    with pytest.raises(ConfigError, match="data.tokenizer"):
        workdir.apply_rules(tiny_config, wd)


def test_none_vocab_is_not_a_mismatch(tmp_path, tiny_config):
    wd = str(tmp_path)
    tiny_config.model.vocab_size = None
    workdir.save_config(tiny_config, wd)
    tiny_config.model.vocab_size = 123
    assert workdir.apply_rules(tiny_config, wd) is None


def test_foreign_files_are_never_overwritten(tmp_path, tiny_config):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="^workdir="):
        workdir.apply_rules(tiny_config, str(tmp_path))
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_unwritable_workdir(tmp_path, tiny_config):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="^workdir="):
        workdir.apply_rules(tiny_config, str(blocker / "run"))
    with pytest.raises(ConfigError, match="^workdir="):
        workdir.apply_rules(tiny_config, str(blocker))
    assert not os.path.exists(str(blocker) + "/run")
