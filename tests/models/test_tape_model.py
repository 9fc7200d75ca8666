"""The algorithmic tasks' model (posjax.models.tape_model) with every registered scheme: the
class head, the reference's embeddings, and padding to a bucket changing nothing real."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax.config import defaults
from posjax.data import tape
from posjax.models import TapeModel, build_model
from posjax.positions import names, scheme_class
from tests.algorithmic_stand_in import ReverseWithEnd

TASK = ReverseWithEnd()
ONE_D = [n for n in names() if scheme_class(n).position_dims == 1]


def _config(scheme="rope", max_length=64, **model):
    config = defaults.get_config("tiny")
    config.position = defaults.position(scheme)
    m = config.model
    m.hidden, m.num_layers, m.num_heads, m.mlp_dim = 16, 2, 2, 32
    m.vocab_size = tape.FIRST_SYMBOL + TASK.input_size + 1
    m.type_vocab_size = 0
    m.activation = "relu"
    m.attention_bias = False
    m.layer_norm_eps = 1e-5
    m.embedding_style = "scaled"
    m.output_classes = TASK.output_size
    m.max_length = max_length
    config.data.seq_len = 16
    for k, v in model.items():
        m[k] = v
    return config


def _batch(n=4, length=None, positions=None, batch=2, seed=0):
    s = TASK.sample(np.random.default_rng(seed), batch, n)
    return tape.tape_batch(s, TASK.input_size, length=length, positions=positions)


def test_build_model_gives_the_class_head_at_every_place():
    model = build_model(_config(), nnx.Rngs(params=0))
    assert isinstance(model, TapeModel)
    b = _batch(n=4, length=16)
    out = model(b)
    assert out["task_logits"].shape == (2, 16, TASK.output_size)
    assert out["task_logits"].dtype == jnp.float32
    assert model.head.kernel[...].shape == (16, TASK.output_size) and model.head.bias is not None


def test_scaled_embeddings_have_no_layer_norm_and_no_dropout_without_a_position_vector():
    model = build_model(_config(scheme="none"), nnx.Rngs(params=0))
    emb = model.encoder.embeddings
    assert emb.norm is None
    b = {k: jnp.asarray(v) for k, v in _batch(n=4).items()}
    x = emb(b, deterministic=False, rngs=nnx.Rngs(dropout=1))  # no dropout: no position added
    table = emb.word.embedding[...]
    np.testing.assert_allclose(x, 4.0 * table[b["input_ids"]], rtol=1e-6)  # sqrt(16) = 4
    learned = build_model(_config(scheme="learned"), nnx.Rngs(params=0)).encoder.embeddings
    dropped = learned(b, deterministic=False, rngs=nnx.Rngs(dropout=1))
    assert (np.asarray(dropped) == 0).mean() > 0.03  # dropout after adding the learned vector


def _padded_equals_unpadded(scheme, positions=None, max_length=64):
    causal = bool(scheme_class(scheme).causal_only)  # xpos: the causal tape model
    model = build_model(_config(scheme, max_length=max_length, causal=causal),
                        nnx.Rngs(params=0))
    n, places = 4, 4 + TASK.output_length(4)  # 10 places, padded to 16
    plain = model(_batch(n=n, positions=positions))["task_logits"]
    padded = model(_batch(n=n, length=16, positions=positions))["task_logits"]
    assert plain.shape[1] == places
    np.testing.assert_allclose(padded[:, :places], plain, rtol=2e-5,
                               atol=2e-5 * float(jnp.max(jnp.abs(plain))))


def test_padding_to_a_bucket_changes_no_real_place_rope():
    _padded_equals_unpadded("rope")


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ONE_D)
def test_padding_to_a_bucket_changes_no_real_place_every_scheme(scheme):
    _padded_equals_unpadded(scheme)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["rope", "xl", "alibi", "sinusoidal", "learned", "none"])
def test_padding_changes_nothing_with_randomized_positions(scheme):
    pos = tape.tape_positions(np.random.default_rng(0), 10, 2048)
    _padded_equals_unpadded(scheme, positions=pos, max_length=2048)


def test_the_model_runs_at_lengths_far_beyond_training():
    model = build_model(_config("rope", max_length=2048), nnx.Rngs(params=0))
    out = model(_batch(n=300, batch=1))["task_logits"]
    assert out.shape == (1, 602, TASK.output_size) and bool(jnp.isfinite(out).all())


def test_dropout_needs_and_uses_its_rngs_in_training():
    model = build_model(_config("rope", dropout=0.5), nnx.Rngs(params=0))
    b = _batch(n=4)
    a = model(b, deterministic=False, rngs=jax.random.PRNGKey(1))["task_logits"]
    c = model(b, deterministic=False, rngs=jax.random.PRNGKey(2))["task_logits"]
    assert not np.allclose(a, c)


def test_layer_positions_feed_each_layer_its_own_positions():
    # batch['layer_positions'][:, i] replaces the positions in layer i (data.randomized_layers):
    # the whole model equals its layers run one by one on their own positions
    config = _config("rope", max_length=2048)
    model = build_model(config, nnx.Rngs(params=0))
    for layer in model.encoder.layers:  # sharp attention, so positions change the outputs
        for dense in (layer.attention.query, layer.attention.key):
            dense.kernel[...] = dense.kernel[...] * 40.0
    b = _batch(n=5)
    rng = np.random.default_rng(1)
    places = b["input_ids"].shape[1]
    per = np.stack([np.sort(rng.choice(2048, places, replace=False)) for _ in range(2)])
    per = np.broadcast_to(per, (2,) + per.shape).astype(np.int32)  # [B, layers, L]
    got = model(dict(b, layer_positions=per))["task_logits"]
    enc = model.encoder
    x = enc.embeddings(b, deterministic=True, rngs=None)
    inputs = enc.attention_inputs(b, dense_rows=False)
    for i, layer in enumerate(enc.layers):
        x = layer(x, dict(b, positions=jnp.asarray(per[:, i]), attention=inputs))
    np.testing.assert_allclose(got, model.head(x).astype(jnp.float32), rtol=1e-5, atol=1e-6)
    # and it is not the model on the batch's positions (RoPE sees them)
    same = model(dict(b, layer_positions=np.broadcast_to(
        b["positions"][:, None], per.shape).astype(np.int32)))["task_logits"]
    np.testing.assert_allclose(same, model(b)["task_logits"], rtol=1e-6, atol=1e-6)
    assert not np.allclose(got, same, atol=1e-4)
