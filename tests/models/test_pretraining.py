"""build_model and the forward pass: every scheme traces, representative ones run, outputs
have the contract's keys, shapes and dtypes; dropout is driven by the rngs passed in."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import models, positions

from tests.models.support import BATCH, LENGTH, VOCAB, make_batch, model_config

def _config_for_scheme(name):
    causal = bool(positions.scheme_class(name).causal_only)
    return model_config({"name": name}, causal=causal, type_vocab_size=2)


@pytest.mark.slow
@pytest.mark.parametrize("name", positions.names())
def test_every_scheme_builds_and_traces(name):
    """Abstract build + abstract forward (no compile): shapes and dtypes for every scheme."""
    config = _config_for_scheme(name)
    abstract = nnx.eval_shape(lambda: models.build_model(config, nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    batch = make_batch()
    dims = abstract.scheme.position_dims
    if dims > 1:  # (row, column) positions of a 4 x 4 grid (3-D: after a frame t = 0)
        idx = np.arange(LENGTH)
        coords = np.stack([0 * idx] * (dims - 2) + [idx // 4, idx % 4], -1)
        batch["positions"] = np.broadcast_to(coords, (BATCH, LENGTH, dims))

    def forward(state):
        return nnx.merge(graphdef, state)(batch)

    out = jax.eval_shape(forward, state)
    key = "lm_logits" if config.model.causal else "mlm_logits"
    assert set(out) == {key, "hidden"}
    assert out[key].shape == (BATCH, LENGTH, VOCAB) and out[key].dtype == jnp.float32
    assert out["hidden"].shape == (BATCH, LENGTH, 32)


@pytest.mark.parametrize("name", ["learned", "rope", "nezha", "t5", "alibi"])
def test_forward_runs_and_is_finite(name):
    model = models.build_model(_config_for_scheme(name), nnx.Rngs(0))
    out = model(make_batch())
    assert out["mlm_logits"].dtype == jnp.float32
    assert out["hidden"].dtype == jnp.float32
    assert np.isfinite(np.asarray(out["mlm_logits"])).all()
    # BERT init (std 0.02) with the post-LN stack: logits are small but not degenerate.
    assert 0 < float(jnp.std(out["mlm_logits"])) < 5


def test_causal_lm_and_sop_heads():
    lm = models.build_model(model_config("rope", causal=True), nnx.Rngs(0))
    assert isinstance(lm, models.CausalLM)
    out = lm(make_batch())
    assert set(out) == {"lm_logits", "hidden"}
    # head_dim set explicitly (heads * head_dim = 64 != hidden 32) is allowed.
    mlm = models.build_model(model_config("rope", sop=True, head_dim=16), nnx.Rngs(0))
    assert mlm.encoder.layers[0].attention.query.kernel.shape == (32, 4, 16)
    assert isinstance(mlm, models.MaskedLM)
    out = mlm(make_batch())
    assert out["sop_logits"].shape == (BATCH, 2) and out["sop_logits"].dtype == jnp.float32


def test_dropout_follows_rngs():
    model = models.build_model(model_config("learned", dropout=0.3), nnx.Rngs(0))
    batch = make_batch()
    fwd = nnx.jit(lambda m, b, k: m(b, deterministic=False, rngs=k)["hidden"])
    a = fwd(model, batch, jax.random.key(1))
    b = fwd(model, batch, jax.random.key(1))
    c = fwd(model, batch, jax.random.key(2))
    clean = model(batch)["hidden"]
    np.testing.assert_array_equal(a, b)  # same key, same masks
    assert not np.allclose(a, c)
    assert not np.allclose(a, clean)
    np.testing.assert_allclose(model(batch)["hidden"], clean)  # deterministic is the default


def test_missing_batch_key_is_named():
    model = models.build_model(model_config("learned"), nnx.Rngs(0))
    batch = make_batch()
    del batch["segment_ids"]
    with pytest.raises(KeyError, match="segment_ids"):
        model(batch)


def test_mlm_logits_at_prediction_positions_equal_the_full_logits():
    model = models.build_model(model_config("rope", sop=True), nnx.Rngs(0))
    batch = make_batch()
    whole = model(batch)
    full = np.asarray(whole["mlm_logits"])
    at = np.array([[3, 0, 7], [15, 2, 2]], np.int32)
    out = model(dict(batch, mlm_positions=at))
    # The sentence-order head pools [CLS] of the whole sequence, never the gathered places.
    np.testing.assert_allclose(out["sop_logits"], whole["sop_logits"], rtol=1e-6)
    assert out["mlm_logits"].shape == (BATCH, 3, VOCAB)
    np.testing.assert_allclose(out["mlm_logits"], np.take_along_axis(full, at[..., None], 1),
                               rtol=1e-5, atol=1e-6)
    assert out["hidden"].shape == (BATCH, LENGTH, 32)  # the encoder output stays whole
