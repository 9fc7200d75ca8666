"""configs/rope.py sets only what it decides: the Rope class holds the scheme's defaults, and
every field of it can still be set from the command line."""

import pytest

from configs import rope, rope_values
from posjax import positions
from posjax.config import overrides
from posjax.errors import ConfigError

ROPE = positions.scheme_class("rope")


def restated(position) -> dict:
    """The fields a config's position section sets to the class's own default."""
    defaults = positions.config_fields(ROPE)
    return {k: v for k, v in position.items() if k != "name" and k in defaults
            and v == defaults[k]}


def test_restating_a_default_is_found():
    config = rope.get_config(None)
    config.position.base = positions.config_fields(ROPE)["base"]
    assert restated(config.position) == {"base": 10000.0}


@pytest.mark.parametrize("module", [rope, rope_values])
def test_rope_configs_restate_no_default(module):
    config = module.get_config(None)
    assert restated(config.position) == {}
    assert config.position.original_length == config.data.seq_len  # the pretraining length


def test_every_rope_field_still_set_from_the_command_line():
    config = rope.get_config("tiny")
    _, given = overrides.split_argv(
        ["train.py", "--config.position.scaling=yarn", "--config.position.factor=8",
         "--config.position.rotary_dim=16", "--config.position.attention_factor=1.5",
         "--noconfig.position.interleaved"])
    overrides.apply(config, given)
    scheme = positions.make(config.position)
    assert (scheme.scaling, scheme.factor, scheme.rotary_dim, scheme.attention_factor,
            scheme.interleaved) == ("yarn", 8.0, 16, 1.5, False)
    assert scheme.base == positions.config_fields(ROPE)["base"]  # untouched: the class's


def test_a_mistyped_rope_field_names_the_nearest():
    _, given = overrides.split_argv(["train.py", "--config.position.scalng=yarn"])
    with pytest.raises(ConfigError, match="position.scaling"):
        overrides.apply(rope.get_config(None), given)
