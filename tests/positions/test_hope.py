"""HoPE (`hope`): attention against a direct definition written from the paper's rule with
explicit rotation matrices (values and gradients, on the reference, chunked and rows paths),
its defining property (the removed pairs see no position, the kept ones only i - j), the
pinned training length, the one-line errors and the listing."""

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

B, L, H, D = 2, 9, 2, 16
T = 64
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=T)
TOL = dict(rtol=2e-5, atol=2e-5)
PATHS = ("reference", "chunked", "rows")


def hope_freqs(dim, base, trained_length):
    """The paper's rule written out: theta_i = base**(-2i/dim); a pair whose period
    2 pi / theta_i is longer than the training length never turns once in training and is
    replaced by a position-independent one (frequency 0)."""
    out = []
    for i in range(dim // 2):
        theta = base ** (-2 * i / dim)
        out.append(theta if 2 * math.pi / theta <= trained_length else 0.0)
    return np.array(out)


def rotation(angles):
    """[..., D/2] angles -> [..., D, D]: pair (2t, 2t+1) turned by angles[..., t]."""
    c, s = jnp.cos(angles), jnp.sin(angles)
    out = jnp.zeros(angles.shape[:-1] + (D, D))
    for t in range(D // 2):
        i, j = 2 * t, 2 * t + 1
        out = out.at[..., i, i].set(c[..., t]).at[..., i, j].set(-s[..., t])
        out = out.at[..., j, i].set(s[..., t]).at[..., j, j].set(c[..., t])
    return out


def direct(q, k, v, pos, freqs):
    """softmax((R(p_i) q_i) . (R(p_j) k_j) / sqrt(D)) v with the given pair frequencies."""
    rot = rotation(pos.astype(jnp.float32)[..., None] * jnp.asarray(freqs, jnp.float32))
    qr = jnp.einsum("blde,blhe->blhd", rot, q)
    kr = jnp.einsum("blde,blhe->blhd", rot, k)
    logits = jnp.einsum("bihd,bjhd->bhij", qr, kr) / np.sqrt(D)
    return jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits, -1), v)


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    q, k, v, ct = (jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))
    pos = jnp.asarray(np.sort(rng.choice(T, (B, L), replace=False), axis=1), jnp.int32)
    return q, k, v, ct, pos


def test_frequencies_follow_the_rule_and_the_trained_length():
    scheme = positions.make("hope").bind(DIMS)
    assert scheme.trained_length == T  # None follows model.max_length when bound
    want = hope_freqs(D, 10000.0, T)
    assert list(want > 0) == [True] * 3 + [False] * 5  # periods 6.3, 19.9, 62.8 | 198.7 ...
    np.testing.assert_allclose(scheme.inv_freq(D), want, rtol=1e-6)
    short = positions.make("hope", trained_length=20).bind(DIMS)
    np.testing.assert_allclose(short.inv_freq(D), hope_freqs(D, 10000.0, 20), rtol=1e-6)
    assert int((short.inv_freq(D) > 0).sum()) == 2


@pytest.mark.slow
def test_matches_direct_definition_values_and_grads_on_every_path():
    q, k, v, ct, pos = _inputs()
    scheme = positions.make("hope").bind(DIMS)
    freqs = hope_freqs(D, 10000.0, T)

    def ours(impl):
        return lambda q, k, v: attend(q, k, v, scheme=scheme, q_pos=pos, k_pos=pos,
                                      implementation=impl, block_q=4, block_k=4)

    def mine(q, k, v):
        return direct(q, k, v, pos, freqs)

    def both(f):
        return f(q, k, v), jax.grad(lambda *a: (f(*a) * ct).sum(), (0, 1, 2))(q, k, v)

    want, want_grads = jax.jit(lambda: both(mine))()
    for impl in PATHS:
        got, grads = jax.jit(lambda: both(ours(impl)))()
        np.testing.assert_allclose(got, want, err_msg=impl, **TOL)
        for a, b in zip(grads, want_grads):
            np.testing.assert_allclose(a, b, err_msg=impl, **TOL)


def _logits(scheme, q, k, q_pos, k_pos):
    qr, kr = scheme.rotate({}, q, k, q_pos, k_pos)
    return jnp.einsum("bihd,bjhd->bhij", qr, kr)


def test_removed_pairs_see_no_position_and_kept_ones_only_the_offset():
    q, k, _, _, pos = _inputs(1)
    scheme = positions.make("hope").bind(DIMS)
    removed = np.repeat(~np.asarray(scheme.kept_pairs(D)), 2)  # dims of the removed pairs
    qr, kr = q * removed, k * removed
    far = pos + 1000  # far past the training length
    base = _logits(scheme, qr, kr, pos, pos)
    np.testing.assert_allclose(_logits(scheme, qr, kr, pos, far), base, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(base, jnp.einsum("bihd,bjhd->bhij", qr, kr), rtol=1e-6)
    # the whole head: logits depend on i - j only, and do depend on it
    full = _logits(scheme, q, k, pos, pos)
    np.testing.assert_allclose(_logits(scheme, q, k, pos + 37, pos + 37), full,
                               rtol=1e-4, atol=1e-4)
    assert np.abs(np.asarray(_logits(scheme, q, k, pos, pos + 1) - full)).max() > 1e-2
    # RoPE itself moves the removed dims' logits with the key position
    rope = positions.make("rope").bind(DIMS)
    assert np.abs(np.asarray(_logits(rope, qr, kr, pos, far) - base)).max() > 1e-2


def test_a_longer_model_keeps_the_trained_pairs():
    scheme = positions.make("hope").bind(DIMS)
    ext = scheme.extend("as_is", 4 * T)
    assert ext.fields == {"trained_length": T}
    longer = positions.make({"name": "hope", **ext.fields}).bind(
        dataclasses.replace(DIMS, max_length=4 * T))
    np.testing.assert_array_equal(longer.inv_freq(D), scheme.inv_freq(D))
    assert positions.scheme_class("hope").offered_methods() == {"as_is": positions.AS_IS_DOC}


def test_bad_fields_are_one_line_errors_and_it_is_listed():
    for value in (6, 0, 12.5, True, "64"):
        with pytest.raises(ConfigError, match="position.trained_length") as err:
            positions.make("hope", trained_length=value)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="position.trained_length"):
        positions.make("hope").bind(dataclasses.replace(DIMS, max_length=4))
    with pytest.raises(ConfigError, match="position.base"):
        positions.make("hope", base=1.0)
    with pytest.raises(ConfigError, match="model.head_dim"):
        positions.make("hope").bind(dataclasses.replace(DIMS, head_dim=7, hidden=14))
    assert "hope  (hooks: rotate, rotate_values)" in listing("schemes")
    assert "trained_length=None" in listing("schemes")
