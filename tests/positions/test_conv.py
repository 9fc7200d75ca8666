"""Convolutional position (`conv`): the depthwise conv against lax.conv_general_dilated
(values and gradients, each padding), boundaries from positions (packing), the causal window,
Islam et al.'s claim on a linear probe, the per-layer placement in a model, and bad fields."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import models, positions
from posjax.errors import ConfigError
from posjax.positions.base import Dims
from posjax.positions.conv import ConvPosition, depthwise_conv
from tests.models.support import make_batch, model_config

B, L, E, K = 2, 12, 6, 5
DIMS = Dims(num_heads=2, head_dim=4, hidden=8, max_length=64)


def _lax_conv(x, kernel, padding):
    """Depthwise cross-correlation by XLA's conv: 'zeros' SAME, 'circular' on a wrapped copy,
    'none' VALID (placed at the window centres, zeros at the K-1 end tokens)."""
    half = kernel.shape[0] // 2
    if padding == "circular":
        x = jnp.concatenate([x[:, -half:], x, x[:, :half]], axis=1)
    conv = jax.lax.conv_general_dilated(
        x, kernel[:, None, :], window_strides=(1,),
        padding="SAME" if padding == "zeros" else "VALID",
        dimension_numbers=("NWC", "WIO", "NWC"), feature_group_count=x.shape[-1])
    if padding == "none":
        conv = jnp.pad(conv, ((0, 0), (half, half), (0, 0)))
    return conv


def test_matches_lax_conv_values_and_grads():
    rng = np.random.RandomState(0)
    x, kernel, ct = (jnp.asarray(rng.randn(*shape), jnp.float32)
                     for shape in ((B, L, E), (K, E), (B, L, E)))
    pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))

    def both(x, w):  # every padding, ours and XLA's, in one compile
        return {padding: [jax.value_and_grad(lambda x, w: (f(x, w) * ct).sum(), (0, 1))(x, w)
                          for f in (lambda x, w: depthwise_conv(x, w, pos, padding),
                                    lambda x, w: _lax_conv(x, w, padding))]
                for padding in ("zeros", "circular", "none")}

    for padding, ((val, grads), (val_ref, grads_ref)) in jax.jit(both)(x, kernel).items():
        np.testing.assert_allclose(val, val_ref, rtol=1e-5, err_msg=padding)
        for a, b in zip(grads, grads_ref):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=padding)


def test_packed_examples_and_padding_are_boundaries():
    # Positions restart for a second packed example and drop to 0 on right padding: each
    # example is convolved as if it were alone in its row.
    rng = np.random.RandomState(1)
    x = jnp.asarray(rng.randn(1, L, E), jnp.float32)
    kernel = jnp.asarray(rng.randn(K, E), jnp.float32)
    pos = jnp.asarray([[0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 0, 0]], jnp.int32)
    out = depthwise_conv(x, kernel, pos, "zeros")
    for start, stop in ((0, 5), (5, 9)):
        alone = _lax_conv(x[:, start:stop], kernel, "zeros")
        np.testing.assert_allclose(out[:, start:stop], alone, rtol=1e-5, atol=1e-6)


def test_causal_window_never_reads_later_tokens():
    x = jnp.asarray(np.random.RandomState(2).randn(1, L, E), jnp.float32)
    pos = jnp.arange(L, dtype=jnp.int32)[None]
    kernel = jnp.ones((K, E), jnp.float32)
    conv = lambda x: depthwise_conv(x, kernel, pos, "zeros", causal=True)[0, 4, 0]  # noqa: E731
    jac = jax.jit(jax.grad(conv))(x)
    reads = np.flatnonzero(np.asarray(jac[0, :, 0]))
    np.testing.assert_array_equal(reads, np.arange(4 - K + 1, 5))


def _probe_accuracies(length=16, width=32, train=300, test=100):
    """Islam et al. ICLR 2020 on a sequence: tokens carry no position (a shared mean vector
    plus noise, as embeddings share a nonzero mean); a least-squares linear probe (one-hot
    targets, argmax) reads the position off the scheme's output on held-out rows. The window
    (2L - 1) spans the row, so zero padding cuts a different part of it at every position.
    Returns {padding: held-out accuracy}."""
    dims = Dims(num_heads=1, head_dim=width, hidden=width, max_length=length)
    schemes = {p: positions.make("conv", kernel_size=2 * length - 1, padding=p).bind(dims)
               for p in ("zeros", "circular")}
    params = schemes["zeros"].init_embed(jax.random.key(0))  # the same kernel for both
    rng = np.random.RandomState(3)
    x = rng.randn(width) + 0.1 * rng.randn(train + test, length, width)
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), x.shape[:2])
    embed = jax.jit(lambda x: {p: s.embed(params, x, pos) for p, s in schemes.items()})
    labels = np.broadcast_to(np.arange(length), x.shape[:2])
    accuracy = {}
    for padding, feats in embed(jnp.asarray(x, jnp.float32)).items():
        feats = np.asarray(feats, np.float64)
        feats = np.concatenate([feats, np.ones(feats.shape[:2] + (1,))], -1)  # bias column
        f_train = feats[:train].reshape(-1, width + 1)
        f_test = feats[train:].reshape(-1, width + 1)
        onehot = np.eye(length)[labels[:train].reshape(-1)]
        w, *_ = np.linalg.lstsq(f_train, onehot, rcond=None)
        accuracy[padding] = np.mean((f_test @ w).argmax(-1) == labels[train:].reshape(-1))
    return accuracy


def test_linear_probe_reads_position_from_zero_padding_not_circular():
    chance = 1 / 16
    accuracy = _probe_accuracies()
    assert accuracy["zeros"] > 0.9  # far above chance
    assert accuracy["circular"] < 2 * chance  # at chance


def test_per_layer_placement_in_a_model(monkeypatch):
    # Abstract build and forward (no compile): every layer owns a kernel and calls the hook.
    config = model_config({"name": "conv", "kernel_size": 3, "placement": "layers"})
    model = nnx.eval_shape(lambda: models.build_model(config, nnx.Rngs(0)))
    assert jax.tree.leaves(nnx.state(model.encoder.embeddings.position)) == []
    kernels = [nnx.state(layer.hook)["tree"]["kernel"] for layer in model.encoder.layers]
    assert len(kernels) == config.model.num_layers and kernels[0].shape == (3, 32)
    calls = []
    original = ConvPosition.layer_input
    monkeypatch.setattr(ConvPosition, "layer_input",
                        lambda self, *a: calls.append(1) or original(self, *a))
    graphdef, state = nnx.split(model)
    out = jax.eval_shape(lambda state: nnx.merge(graphdef, state)(make_batch()), state)
    assert out["hidden"].shape[-1] == 32 and len(calls) == config.model.num_layers
    scheme = positions.make("conv", placement="layers")
    assert scheme.hooks == ("layer_input",) and scheme.attention_hooks == ()


@pytest.mark.parametrize("fields,match", [
    (dict(padding="reflect"), "position.padding"),
    (dict(kernel_size=4), "position.kernel_size"),
    (dict(placement="attention"), "position.placement"),
])
def test_bad_fields(fields, match):
    with pytest.raises(ConfigError, match=match):
        positions.make("conv", **fields)


def test_bad_bindings():
    with pytest.raises(ConfigError, match="position.padding.*causal"):
        positions.make("conv", padding="circular").bind(dataclasses.replace(DIMS, causal=True))
    with pytest.raises(ConfigError, match="position.kernel_size"):
        positions.make("conv", padding="none", kernel_size=65).bind(DIMS)
