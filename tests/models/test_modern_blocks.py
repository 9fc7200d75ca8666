"""The modern-encoder options (ModernBERT, NomicBERT): the gated MLP against numpy, bias-free
norms and projections leave no bias parameter, and layer 0 without an attention norm."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from posjax import models
from posjax.models.layers import LayerNorm, Mlp

from tests.models.support import make_batch, model_config

MODERN = dict(mlp="glu", norm_bias=False, attention_bias=False, mlp_bias=False,
              head_bias=False, post_ln=False, first_attention_norm=False, type_vocab_size=0)


def _gelu(x):
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


@pytest.mark.parametrize("activation,act", [("gelu", _gelu), ("silu", lambda x: x / (1 + np.exp(-x)))])
def test_glu_mlp_is_act_of_input_times_gate(activation, act):
    """GeGLU / SwiGLU: (act(x W_in + b_in) * (x W_gate + b_gate)) W_o + b_o, input half first."""
    spec = models.validate_model_config(model_config("rope", mlp="glu", activation=activation),
                                        require_vocab=True)
    mlp = Mlp(spec, rngs=nnx.Rngs(params=0))
    rng = np.random.default_rng(0)
    for d in (mlp.wi, mlp.wo):  # nonzero biases, so a swapped half cannot hide
        d.bias[...] = rng.normal(size=d.bias.shape).astype(np.float32)
    x = rng.normal(size=(2, 3, spec.hidden)).astype(np.float32)
    wi, bi = np.asarray(mlp.wi.kernel[...]), np.asarray(mlp.wi.bias[...])
    assert wi.shape == (spec.hidden, 2, spec.mlp_dim)
    h = act(x @ wi[:, 0] + bi[0]) * (x @ wi[:, 1] + bi[1])
    want = h @ np.asarray(mlp.wo.kernel[...]) + np.asarray(mlp.wo.bias[...])
    np.testing.assert_allclose(np.asarray(mlp(x)), want, atol=2e-5, rtol=1e-5)


def test_layer_norm_without_bias():
    ln = LayerNorm(4, eps=1e-5, dtype=np.float32, rngs=nnx.Rngs(params=0), use_bias=False)
    assert ln.bias is None
    ln.scale[...] = np.asarray([1.0, 2.0, 3.0, 4.0], np.float32)
    x = np.asarray([[1.0, 2.0, 4.0, 9.0]], np.float32)
    want = (x - x.mean()) / np.sqrt(x.var() + 1e-5) * np.asarray([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(np.asarray(ln(x)), want, atol=1e-5)


def test_modern_model_has_exactly_its_parameters():
    """No bias anywhere but the tied output bias; no attention norm on layer 0; a final norm."""
    model = models.build_model(model_config("rope", **MODERN), nnx.Rngs(params=0))
    flat = {"/".join(map(str, p)): v for p, v in
            jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(model, nnx.Param)))[0]
            for p in [tuple(k.key for k in p)]}
    biases = [n for n in flat if n.endswith("bias")]
    assert biases == ["lm_head/bias"], biases
    assert not any(n.startswith("encoder/layers/0/attention_norm") for n in flat)
    assert "encoder/layers/1/attention_norm/scale" in flat
    assert "encoder/final_norm/scale" in flat
    out = model(make_batch())
    assert np.isfinite(np.asarray(out["mlm_logits"])).all()
