"""The LM head is really tied to the input embedding; the SOP head reads [CLS]."""

from __future__ import annotations

import jax
import pytest
import jax.numpy as jnp
import numpy as np
from flax import nnx

from posjax import models

from tests.models.support import VOCAB, make_batch, model_config


def _leaves(module):
    return {
        "/".join(map(str, path)): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(nnx.state(module, nnx.Param))[0]
    }


@pytest.mark.slow
def test_logits_are_features_times_embedding_transpose_plus_bias():
    model = models.build_model(model_config("learned"), nnx.Rngs(0))
    # A non-zero output bias, so the test sees it is added.
    model.lm_head.bias[...] = jax.random.normal(jax.random.key(3), (VOCAB,))
    out = model(make_batch())
    table = model.encoder.embeddings.word.embedding[...]
    expected = model.lm_head.features(out["hidden"]) @ table.T + model.lm_head.bias[...]
    np.testing.assert_allclose(out["mlm_logits"], expected, rtol=1e-5, atol=1e-5)
    # The head owns no [vocab, width] matrix of its own: only transform, norm and bias.
    shapes = {k: v.shape for k, v in _leaves(model.lm_head).items()}
    assert all(VOCAB not in s or s == (VOCAB,) for s in shapes.values()), shapes


@pytest.mark.slow
def test_gradient_reaches_the_embedding_through_the_head():
    """Token 3 never occurs in the input, so its embedding row gets gradient only via the
    tied output projection."""
    model = models.build_model(model_config("learned"), nnx.Rngs(0))
    batch = make_batch()
    assert not (batch["input_ids"] == 3).any()

    def loss(model):
        return model(batch)["mlm_logits"][..., 3].sum()

    grads = nnx.jit(nnx.grad(loss))(model)  # one compile beats op-by-op eager VJPs
    row = grads["encoder"]["embeddings"]["word"]["embedding"][...][3]
    assert float(jnp.abs(row).max()) > 0
    others = grads["encoder"]["embeddings"]["word"]["embedding"][...][4]
    assert float(jnp.abs(others).max()) == 0  # token 4 neither occurs nor is scored


def test_factorized_head_maps_hidden_to_embedding_width():
    model = models.build_model(model_config("learned", embedding_dim=16), nnx.Rngs(0))
    assert model.lm_head.transform.kernel.shape == (32, 16)
    assert model.encoder.embeddings.word.embedding.shape == (VOCAB, 16)
    out = model(make_batch())
    table = model.encoder.embeddings.word.embedding[...]
    expected = model.lm_head.features(out["hidden"]) @ table.T + model.lm_head.bias[...]
    np.testing.assert_allclose(out["mlm_logits"], expected, rtol=1e-5, atol=1e-5)


def test_sop_head_reads_the_first_token_only():
    model = models.build_model(model_config("learned", sop=True), nnx.Rngs(0))
    h = jax.random.normal(jax.random.key(0), (2, 16, 32))
    h2 = h.at[:, 1:].set(0.0)
    np.testing.assert_allclose(model.sop_head(h), model.sop_head(h2))
    assert model.sop_head(h).shape == (2, 2)
