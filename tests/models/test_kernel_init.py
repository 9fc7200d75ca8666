"""model.kernel_init: 'fan_in' gives every dense kernel haiku's Linear init (a normal of stddev
1/sqrt(fan_in) truncated at 2 stddev, fan_in = the product of the input axes), the embedding
tables keep BERT's 0.02, and 'normal' is BERT's 0.02 everywhere."""

from __future__ import annotations

import math

import numpy as np
import pytest
from flax import nnx

from posjax import models, schema
from posjax.errors import ConfigError
from tests.models.support import model_config

# The stddev of a standard normal truncated to [-2, 2]: neither haiku nor jax rescale it.
TRUNCATED_STD = 0.8796256610342398


def _kernels(kernel_init):
    config = model_config("rope", kernel_init=kernel_init, hidden=64, num_heads=4, mlp_dim=256)
    model = models.build_model(config, nnx.Rngs(0))
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    return {"/".join(map(str, path)): np.asarray(v.get_value()) for path, v in flat}


@pytest.mark.parametrize("kernel_init", ["normal", "fan_in"])
def test_dense_kernels_by_fan_in_and_tables_at_bert_scale(kernel_init):
    params = _kernels(kernel_init)
    fan_in = {"attention/query/kernel": 64, "attention/out/kernel": 64, "mlp/wi/kernel": 64,
              "mlp/wo/kernel": 256}
    for suffix, fan in fan_in.items():
        w = np.concatenate([v.ravel() for k, v in params.items() if k.endswith(suffix)])
        scale = 1.0 / math.sqrt(fan) if kernel_init == "fan_in" else 0.02
        assert np.abs(w).max() <= 2 * scale * (1 + 1e-6), suffix  # truncated at 2 stddev
        assert w.std() == pytest.approx(scale * TRUNCATED_STD, rel=0.08), suffix
    table = params["encoder/embeddings/word/embedding"]
    assert table.std() == pytest.approx(0.02 * TRUNCATED_STD, rel=0.1)


def test_an_unknown_kernel_init_is_one_config_error():
    config = model_config("rope", kernel_init="xavier")
    with pytest.raises(ConfigError, match="model.kernel_init"):
        schema.checked(config, "model.kernel_init")
