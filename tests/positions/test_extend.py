"""Scheme.extend directly (tests/positions/test_extension_golden.py pins what eval.py and
Pretrained.extend get from it), and Pretrained.extend with a method that rewrites the table."""

import numpy as np
import pytest

from posjax import positions
from posjax.errors import ConfigError
from posjax.positions import Dims, ExtendSettings, NotApplicable, tables

DIMS = Dims(num_heads=2, head_dim=4, hidden=8, max_length=16)


def test_learned_offers_its_table_methods_and_pins_its_rows():
    learned = positions.make("learned").bind(DIMS)
    assert learned.extend("as_is", 64).fields == {"rows": 16}  # the trained table's size
    table = np.arange(16 * 3, dtype=np.float32).reshape(16, 3)
    tile = learned.extend("tile", 40, trained_length=8)
    assert tile.replace and tile.fields == {"name": "learned", "rows": 40}
    grown = tile.embed_rewrite({"table": table, "other": 1})
    np.testing.assert_array_equal(grown["table"], tables.extend(table[:8], 40, "tile"))
    assert grown["other"] == 1
    hier = learned.extend("hierarchical", 64, trained_length=8, settings=ExtendSettings(alpha=0.3))
    assert hier.fields == {"name": "hierarchical", "rows": 8, "alpha": 0.3}
    np.testing.assert_array_equal(hier.embed_rewrite({"table": table})["table"], table[:8])
    with pytest.raises(NotApplicable, match="reaches 64 positions < 65") as e:
        learned.extend("hierarchical", 65, trained_length=8)
    assert e.value.allowed == "<= rows**2 = 64 for a hierarchical table of 8 rows"
    with pytest.raises(NotApplicable, match="'multiplicative' has no extension 'tile'"):
        positions.make("multiplicative").bind(DIMS).extend("tile", 64)  # for added tables only


def test_rope_scalings_and_rerope():
    rope = positions.make("rope").bind(DIMS)
    yarn = rope.extend("yarn", 64, trained_length=16)
    assert yarn.fields == {"scaling": "yarn", "factor": 4.0, "original_length": 16}
    assert yarn.global_only and yarn.embed_rewrite is None
    assert rope.extend("dynamic_ntk", 64).fields["factor"] == 1.0  # n/T from the running length
    assert rope.extend("linear", 64, settings=ExtendSettings(factor=8.0)).fields["factor"] == 8.0
    leaky = rope.extend("leaky_rerope", 64, trained_length=16)
    assert leaky.fields == {"name": "leaky_rerope", "window": 8, "base": 10000.0,
                            "interleaved": True, "leaky_factor": 7.0}
    with pytest.raises(NotApplicable, match="on_values=True"):
        positions.make("rope", on_values=True).bind(DIMS).extend("rerope", 64)
    with pytest.raises(ConfigError, match="position.scaling='yarn'"):
        positions.make("rope", scaling="yarn", factor=2.0, original_length=8).check_original()


def test_pretrained_extend_applies_a_table_rewrite():
    """Pretrained.extend(L, 'tile') runs the scheme's rewrite on the params: the longer model
    (built, no compile) holds the trained rows repeated."""
    from flax import nnx

    from posjax import models, pretrained
    from tests.models.support import model_config

    config = model_config("learned")  # rows = max_length = 32
    model = models.build_model(config, nnx.Rngs(0))
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    short = pretrained.Pretrained(config, params)
    long = short.extend(64, method="tile")
    table = params["encoder"]["embeddings"]["position"]["tree"]["table"]
    got = long.params["encoder"]["embeddings"]["position"]["tree"]["table"]
    np.testing.assert_array_equal(np.asarray(got), np.concatenate([table, table]))
    assert dict(long.config.position) == {"name": "learned", "rows": 64}
    with pytest.raises(ConfigError, match="did you mean tile"):
        short.extend(64, method="tlie")
