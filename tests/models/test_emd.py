"""DeBERTa's Enhanced Mask Decoder (`deberta` emd=N): the model against the decoder written
out with the model's own layers, the defining property (absolute positions enter only in the
decoder: without it the MLM logits ignore a shift of every position, with it they do not),
a layer with queries from its own input is the plain layer, and bad fields."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import models, positions
from posjax.errors import ConfigError
from tests.models.support import make_batch, model_config

DEBERTA = {"name": "deberta", "bucket_size": 8, "max_position": 32}


def _model(emd):
    # One layer: the decoder re-runs it (the smallest model that has one; fewer to compile).
    config = model_config(dict(DEBERTA, emd=emd), dropout=0.0, num_layers=1)
    build = lambda: models.build_model(config, nnx.Rngs(0))  # noqa: E731
    # Parameters made in one compiled init: op-by-op eager init costs far more on CPU.
    graphdef, _ = nnx.split(nnx.eval_shape(build))
    return nnx.merge(graphdef, jax.jit(lambda: nnx.split(build())[1])())


def _by_hand(model, batch, decoder=True):
    """microsoft/DeBERTa emd_context_layer: H = the last layer's input; q = H + P[pos]; the
    last layer twice with keys/values H and queries q; the MLM head on the result. Without
    the decoder: the plain encoder, the same layers once each."""
    enc = model.encoder
    x = enc.embeddings(batch, deterministic=True, rngs=None)  # the one layer's input
    if not decoder:
        return model.lm_head(enc.layers[0](x, batch), enc.embeddings.word)
    query = x + enc.decoder.value()["table"][batch["positions"]]
    for _ in range(2):
        query = enc.layers[0](x, batch, query=query)
    return model.lm_head(query, enc.embeddings.word)


@pytest.mark.slow
def test_decoder_matches_its_definition_and_adds_absolute_positions():
    batch = {k: jnp.asarray(v) for k, v in make_batch().items()}
    shifted = dict(batch, positions=batch["positions"] + 5)
    model = _model(2)
    enc = model.encoder
    assert enc.decoder.value()["table"].shape == (32, 32)  # model.max_length rows
    x = jax.random.normal(jax.random.key(0), batch["input_ids"].shape + (32,))

    def run(b, s):
        return (model(b)["mlm_logits"], _by_hand(model, s), _by_hand(model, b),
                _by_hand(model, b, decoder=False), _by_hand(model, s, decoder=False),
                enc.layers[0](x, b), enc.layers[0](x, b, query=x))

    emd, emd_shift, by_hand, plain, plain_shift, layer, layer_q = jax.jit(
        run)(batch, shifted)
    np.testing.assert_allclose(emd, by_hand, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(plain, plain_shift, rtol=1e-5, atol=1e-5)  # relative only
    assert not np.allclose(emd, emd_shift, atol=1e-4)  # the decoder reads absolute positions
    assert not np.allclose(emd, plain, atol=1e-4)
    # Queries from the same states as the keys: exactly the plain layer.
    np.testing.assert_allclose(layer, layer_q, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fields,match", [
    (dict(emd=-1), "position.emd="), (dict(emd="2"), "position.emd="),
    (dict(emd=2, emd_rows=16), "position.emd_rows"), (dict(emd=2, emd_rows=0), "position.emd_rows"),
])
def test_bad_fields(fields, match):
    with pytest.raises(ConfigError, match=match):
        models.validate_model_config(model_config(dict(DEBERTA, **fields)))


def test_no_decoder_by_default():
    scheme = positions.make("deberta")
    assert scheme.decoder_passes() == 0 and positions.make("t5").decoder_passes() == 0
    abstract = nnx.eval_shape(lambda: models.build_model(
        model_config(dict(DEBERTA)), nnx.Rngs(0)))
    assert abstract.encoder.decoder is None
