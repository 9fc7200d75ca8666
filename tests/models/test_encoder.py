"""Encoder properties: packed examples are isolated, padding is inert, the causal stack never
looks ahead, ALBERT sharing and factorization, shared vs per-layer scheme parameters."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from posjax import models

from tests.models.support import VOCAB, make_batch, model_config

# One scheme per hook family: embed (learned), rotate (rope), content keys+values (nezha),
# bias (t5). Each is built once per test module.
SCHEMES = ["learned", "rope", "nezha", "t5"]


@pytest.fixture(scope="module")
def encoders():
    return {name: models.build_model(model_config(name), nnx.Rngs(0)) for name in SCHEMES}


@pytest.mark.slow
@pytest.mark.parametrize("name", SCHEMES)
def test_packed_examples_do_not_see_each_other(encoders, name):
    model = encoders[name]
    batch = make_batch(segments=[10, 6])
    other = dict(batch)
    other["input_ids"] = batch["input_ids"].copy()
    other["input_ids"][:, 10:] = (batch["input_ids"][:, 10:] + 7) % (VOCAB - 5) + 5
    a, b = model(batch), model(other)
    np.testing.assert_allclose(a["hidden"][:, :10], b["hidden"][:, :10], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        a["mlm_logits"][:, :10], b["mlm_logits"][:, :10], rtol=1e-5, atol=1e-5
    )
    assert not np.allclose(a["hidden"][:, 10:], b["hidden"][:, 10:])  # segment 2 did change


@pytest.mark.slow
@pytest.mark.parametrize("name", SCHEMES)
def test_padding_is_inert(encoders, name):
    """Real tokens' outputs do not depend on what the padding holds, and equal the outputs
    of the same example without padding."""
    model = encoders[name]
    batch = make_batch(real=11)
    other = dict(batch)
    other["input_ids"] = batch["input_ids"].copy()
    other["input_ids"][:, 11:] = 9  # garbage ids and positions in the padded slots
    other["positions"] = batch["positions"].copy()
    other["positions"][:, 11:] = 3
    a, b = model(batch)["hidden"], model(other)["hidden"]
    np.testing.assert_allclose(a[:, :11], b[:, :11], rtol=1e-5, atol=1e-5)
    short = {k: v[:, :11] for k, v in batch.items()}
    np.testing.assert_allclose(a[:, :11], model(short)["hidden"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["learned", "rope"])
def test_causal_output_ignores_the_future(name):
    model = models.build_model(model_config(name, causal=True), nnx.Rngs(0))
    batch = make_batch()
    other = dict(batch)
    other["input_ids"] = batch["input_ids"].copy()
    other["input_ids"][:, 6:] = (batch["input_ids"][:, 6:] + 3) % (VOCAB - 5) + 5
    a, b = model(batch)["lm_logits"], model(other)["lm_logits"]
    np.testing.assert_allclose(a[:, :6], b[:, :6], rtol=1e-5, atol=1e-5)
    assert not np.allclose(a[:, 6:], b[:, 6:])


def test_bidirectional_encoder_does_look_ahead(encoders):
    model = encoders["rope"]
    batch = make_batch()
    other = dict(batch)
    other["input_ids"] = batch["input_ids"].copy()
    other["input_ids"][:, -1] = (batch["input_ids"][:, -1] + 1) % (VOCAB - 5) + 5
    assert not np.allclose(model(batch)["hidden"][:, 0], model(other)["hidden"][:, 0])


def test_albert_sharing_and_factorization():
    plain = models.build_model(model_config("learned", num_layers=3), nnx.Rngs(0))
    shared = models.build_model(
        model_config("learned", num_layers=3, share_layers=True), nnx.Rngs(0)
    )
    factored = models.build_model(
        model_config("learned", num_layers=3, share_layers=True, embedding_dim=16), nnx.Rngs(0)
    )
    layer = models.count_params(plain.encoder.layers[0])
    assert len(shared.encoder.layers) == 1 and len(plain.encoder.layers) == 3
    assert models.count_params(plain) - models.count_params(shared) == 2 * layer
    emb = factored.encoder.embeddings
    assert emb.word.embedding.shape == (VOCAB, 16)
    assert emb.project.kernel.shape == (16, 32)
    # The embed hook works in the embedding width, as ALBERT's own position table does.
    assert emb.position.value()["table"].shape == (32, 16)
    assert models.count_params(factored) < models.count_params(shared)
    out = factored(make_batch())
    assert out["hidden"].shape == (2, 16, 32) and out["mlm_logits"].shape == (2, 16, VOCAB)


def test_shared_layers_apply_one_module_num_layers_times():
    """With sharing, running 3 layers equals applying the one layer 3 times."""
    model = models.build_model(
        model_config("rope", num_layers=3, share_layers=True, dropout=0.0), nnx.Rngs(0)
    )
    batch = make_batch()
    batch_j = {k: jax.numpy.asarray(v) for k, v in batch.items()}
    x = model.encoder.embeddings(batch_j, deterministic=True, rngs=None)
    for _ in range(3):
        x = model.encoder.layers[0](x, batch_j)
    np.testing.assert_allclose(model(batch)["hidden"], x, rtol=1e-5, atol=1e-5)


def test_scheme_params_per_layer_or_shared():
    per_layer = models.build_model(model_config("kerple"), nnx.Rngs(0))
    assert per_layer.encoder.shared_hook is None
    assert all(layer.hook is not None for layer in per_layer.encoder.layers)
    shared = models.build_model(model_config("t5"), nnx.Rngs(0))  # T5 shares one table
    assert shared.encoder.shared_hook.value()["table"].shape == (32, 4)
    assert all(layer.hook is None for layer in shared.encoder.layers)
    unshared = models.build_model(
        model_config({"name": "t5", "share_layers": False}), nnx.Rngs(0)
    )
    assert unshared.encoder.shared_hook is None
    tables = [layer.hook.value()["table"] for layer in unshared.encoder.layers]
    assert not np.allclose(tables[0], tables[1])  # independent draws per layer
