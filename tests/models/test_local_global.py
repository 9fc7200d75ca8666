"""Local / global / NoPE layers wired into the encoder (layout.plan -> one layer per kind).

A tiny ModernBERT-like stack: 3 layers, global every 3rd from layer 0, window 8 at length 32,
RoPE base 160000 on the global layer and 10000 on the local ones (model.local_position). The
defining properties, on the built layers: a local layer's output for token i does not change
when tokens more than w/2 away change, while a global layer's does; a NoPE layer does not
depend on the positions at all, while a RoPE layer does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax.errors import ConfigError
from posjax.models import build_model, validate_model_config
from posjax.training.optimizer import decay_mask
from tests.models.support import make_batch, model_config

LENGTH, WINDOW = 32, 8


def _config(**model):
    layout = dict(local_window=WINDOW, global_every=3, local_position={"base": 10000.0})
    config = model_config({"name": "rope", "base": 160000.0}, **{**layout, **model})
    config.data.seq_len = LENGTH
    return config


@pytest.fixture(scope="module")
def stack():
    model = build_model(_config(num_layers=3, nope_every=None), nnx.Rngs(params=0))
    batch = make_batch(length=LENGTH)
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    x = jax.random.normal(jax.random.key(1), (2, LENGTH, 32), jnp.float32)
    return model, batch, x


def test_each_layer_gets_its_kind(stack):
    model, _, _ = stack
    layers = model.encoder.layers
    windows = [layer.attention.window for layer in layers]
    bases = [layer.attention.scheme.base for layer in layers]
    assert windows == [None, WINDOW, WINDOW]
    assert bases == [160000.0, 10000.0, 10000.0]


@pytest.mark.slow
def test_local_layer_ignores_tokens_beyond_half_the_window(stack):
    model, batch, x = stack
    i, half = 12, WINDOW // 2
    far = (jnp.abs(jnp.arange(LENGTH) - i) > half)[None, :, None]
    x2 = jnp.where(far, x + 3.0 * jax.random.normal(jax.random.key(2), x.shape), x)
    local, glob = model.encoder.layers[1], model.encoder.layers[0]
    a, b = local(x, batch), local(x2, batch)
    np.testing.assert_allclose(a[:, i], b[:, i], rtol=1e-5, atol=1e-5)
    # ...but the window's edge is inside: changing token i + half moves token i
    edge = (jnp.arange(LENGTH) == i + half)[None, :, None]
    x3 = jnp.where(edge, x + 3.0, x)
    assert float(jnp.abs(local(x3, batch)[:, i] - a[:, i]).max()) > 1e-3
    # and a global layer sees the far tokens
    assert float(jnp.abs(glob(x, batch)[:, i] - glob(x2, batch)[:, i]).max()) > 1e-3


def test_nope_layer_has_no_position_dependence():
    # All layers global here: a local layer's window is itself a condition on positions.
    config = _config(num_layers=3, nope_every=2, local_window=None, local_position={})
    model = build_model(config, nnx.Rngs(params=0))
    layers = model.encoder.layers
    assert [layer.attention.scheme.attention_hooks for layer in layers] == [
        ("rotate",), (), ("rotate",)]
    batch = {k: jnp.asarray(v) for k, v in make_batch(length=LENGTH).items()}
    shuffled = dict(batch, positions=jnp.asarray(
        np.random.default_rng(0).permutation(LENGTH)[None].repeat(2, 0), jnp.int32))
    x = jax.random.normal(jax.random.key(3), (2, LENGTH, 32), jnp.float32)
    nope, rope = layers[1], layers[0]
    # positions reach a NoPE layer nowhere: the same computation, bit for bit
    np.testing.assert_array_equal(nope(x, batch), nope(x, shuffled))
    # (at init q.k is tiny, so RoPE's effect is small, but it is there)
    assert float(jnp.abs(rope(x, batch) - rope(x, shuffled)).max()) > 1e-5


@pytest.mark.slow
def test_sinks_are_learned_per_head():
    config = _config(num_layers=3, attention_sinks=True)
    model = build_model(config, nnx.Rngs(params=0))
    batch = {k: jnp.asarray(v) for k, v in make_batch(length=LENGTH).items()}
    assert model.encoder.layers[0].attention.sinks[...].shape == (4,)

    def loss(model):
        return jnp.sum(model(batch)["hidden"].astype(jnp.float32) ** 2)

    grads = nnx.grad(loss)(model)
    flat = jax.tree_util.tree_flatten_with_path(grads)[0]
    sinks = [g for path, g in flat if "sinks" in jax.tree_util.keystr(path)]
    assert len(sinks) == 3 and all(float(jnp.abs(g).min()) > 0 for g in sinks)
    # per-head offsets like biases: no weight decay
    decay = decay_mask(nnx.to_pure_dict(nnx.state(model, nnx.Param)))  # as training passes it
    flat = jax.tree_util.tree_flatten_with_path(decay)[0]
    assert [d for path, d in flat if "sinks" in jax.tree_util.keystr(path)] == [False] * 3


@pytest.mark.parametrize("model,field", [
    (dict(local_window=0), "model.local_window"),
    (dict(local_window=LENGTH + 1), "model.local_window"),
    (dict(global_every=4, global_first=False), "model.global_every"),  # 3 layers: none global
    (dict(local_position={"nope": 1.0}), "model.local_position.nope"),
    (dict(local_position={"name": "alibi"}), "model.local_position.name"),
    (dict(local_window=None), "model.local_position"),  # overrides with no local layer
    (dict(share_layers=True), "model.share_layers"),
])
def test_bad_layout_names_the_field(model, field):
    config = _config(num_layers=3)
    for key, value in model.items():
        config.model[key] = value
    with pytest.raises(ConfigError) as e:
        validate_model_config(config)
    assert e.value.field == field
