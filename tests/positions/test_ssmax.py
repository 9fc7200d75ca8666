"""SSMax (`ssmax`): attention against the paper's equation written out with explicit rotations
and key counts (values and gradients, the learned s included, on the reference, chunked and
rows paths, causal with padding and bidirectional with packed segments), log-n as the case
s = 1/log(T), the defining property (the top weight does not fade as n grows), the errors,
the listing, and the learned s of every layer through the model."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import positions
from posjax.__main__ import listing
from posjax.attention import attend
from posjax.errors import ConfigError
from posjax.positions.base import Dims
from tests.positions import attention_cases

B, L = attention_cases.B, attention_cases.L
H, D = 2, 8
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)
TOL = dict(rtol=2e-5, atol=2e-5)
PATHS = ("reference", "chunked", "rows")


def direct(q, k, v, pos, s, allowed):
    """weight_ij = n_i**(s_h z_ij) / sum_j' n_i**(s_h z_ij') over the keys query i may attend
    (allowed [B, L, L]), n_i their number, z = RoPE logits (R(p_i) q_i . R(p_j) k_j / sqrt(D))."""
    theta = 10000.0 ** (-np.arange(0, D, 2) / D)
    ang = pos.astype(jnp.float32)[..., None] * theta  # [B, L, D/2]
    c, si = jnp.cos(ang)[:, :, None], jnp.sin(ang)[:, :, None]

    def rot(x):
        a, b = x[..., 0::2], x[..., 1::2]
        return jnp.stack([a * c - b * si, b * c + a * si], -1).reshape(x.shape)

    z = jnp.einsum("bihd,bjhd->bhij", rot(q), rot(k)) / np.sqrt(D)
    n = allowed.sum(-1).astype(jnp.float32)[:, None]  # [B, 1, L]
    logits = jnp.where(allowed[:, None], z * (s[None, :, None] * jnp.log(n))[..., None], -jnp.inf)
    return jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits, -1), v)


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    q, k, v, ct = (jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))
    offset = jnp.asarray(rng.uniform(-0.2, 0.3, H), jnp.float32)
    return q, k, v, ct, offset


@pytest.mark.slow
@pytest.mark.parametrize("case", [0, 1], ids=["causal_padded", "bidirectional_packed"])
def test_matches_the_papers_equation_values_and_grads_on_every_path(case):
    causal, kw, pos, allowed = attention_cases.padded_and_packed()[case]
    q, k, v, ct, offset = _inputs(case)
    scheme = positions.make("ssmax").bind(dataclasses.replace(DIMS, causal=causal))
    pos = jnp.asarray(pos, jnp.int32)

    def mine(q, k, v, off):
        return direct(q, k, v, pos, 0.43 + off, jnp.asarray(allowed))

    def ours(impl):
        return lambda q, k, v, off: attend(
            q, k, v, scheme=scheme, params={"s_offset": off}, q_pos=pos, k_pos=pos,
            causal=causal, implementation=impl, block_q=4, block_k=4, **kw)

    def both(f):
        return jax.jit(lambda: (f(q, k, v, offset), jax.grad(
            lambda *a: (f(*a) * ct).sum(), (0, 1, 2, 3))(q, k, v, offset)))()

    want, want_grads = both(mine)
    real = np.asarray(allowed.any(-1))  # padded queries of row 1 have no key in the paper's
    for impl in PATHS:  # form (0/0); posjax gives them 0
        got, grads = both(ours(impl))
        np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real],
                                   err_msg=impl, **TOL)
        for name, a, b in zip(("dq", "dk", "dv", "ds"), grads, want_grads):
            np.testing.assert_allclose(a, b, err_msg=f"{impl} {name}", **TOL)
    assert np.abs(np.asarray(want_grads[3])).min() > 0  # every head's s learns


def test_log_n_is_ssmax_with_s_one_over_log_T():
    q, k, v, _, _ = _inputs(2)
    T = 16
    ssmax = positions.make("ssmax", s_init=1 / math.log(T)).bind(DIMS)
    rope = positions.make("rope").bind(DIMS)
    params = ssmax.init_layer(jax.random.key(0))
    for impl in ("reference", "chunked"):
        got = attend(q, k, v, scheme=ssmax, params=params, implementation=impl, block_q=4,
                     block_k=4, kv_mask=jnp.asarray(np.arange(L)[None] < np.array([[L], [5]])))
        want = attend(q, k, v, scheme=rope, implementation=impl, block_q=4, block_k=4,
                      logn_length=T, kv_mask=jnp.asarray(np.arange(L)[None] < np.array([[L], [5]])))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=impl)


@pytest.mark.slow
def test_the_top_weight_does_not_fade_as_the_keys_grow():
    """One key's logit stands out by z; the rest are 0. Softmax's weight on it falls like
    e**z / (e**z + n - 1); SSMax's is n**(s z) / (n**(s z) + n - 1), which grows with n once
    s z > 1. Only the first pair rotates, and the content sits in the others."""
    dims = dataclasses.replace(DIMS, num_heads=1, hidden=D)
    ssmax = positions.make("ssmax", rotary_dim=2, s_init=1.0).bind(dims)
    params = ssmax.init_layer(jax.random.key(0))
    z = 2.0

    def top_weight(n):
        q = jnp.zeros((1, 1, 1, D)).at[..., 2].set(z * np.sqrt(D))
        k = jnp.zeros((1, n, 1, D)).at[:, 0, :, 2].set(1.0)
        v = jnp.zeros((1, n, 1, D)).at[:, 0, :, 0].set(1.0)
        return float(attend(q, k, v, scheme=ssmax, params=params, implementation="reference",
                            q_pos=jnp.zeros((1, 1), jnp.int32))[0, 0, 0, 0])

    weights = {n: top_weight(n) for n in (8, 64, 512)}
    for n, w in weights.items():
        np.testing.assert_allclose(w, n ** z / (n ** z + n - 1), rtol=1e-5)
    assert weights[8] < weights[64] < weights[512]
    softmax = [math.exp(z) / (math.exp(z) + n - 1) for n in (8, 64, 512)]  # what RoPE gets
    assert softmax[0] > softmax[1] > softmax[2]


def test_bad_fields_one_line_and_listing():
    for value in (0, -0.5, True, "0.4"):
        with pytest.raises(ConfigError, match="position.s_init") as err:
            positions.make("ssmax", s_init=value)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="position.rotary_dim"):
        positions.make("ssmax", rotary_dim=3)
    assert "ssmax  (hooks: rotate, rotate_values, length_scale)" in listing("schemes")
    assert "s_init=0.43" in listing("schemes")
    assert positions.scheme_class("ssmax").offered_methods() == {"as_is": positions.AS_IS_DOC}


@pytest.mark.slow
def test_every_layer_learns_its_s_through_the_model():

    from tests.models.support import layer_hook_grads, make_batch, model_config

    config = model_config({"name": "ssmax"})
    for tree in layer_hook_grads(config, make_batch(segments=[9, 7])):
        g = np.asarray(tree["s_offset"])
        assert g.shape == (config.model.num_heads,) and np.abs(g).min() > 0
