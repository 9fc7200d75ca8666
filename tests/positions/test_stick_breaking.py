"""Stick-breaking attention (`stick_breaking`): values and gradients against the definition
written out as plain products over keys (causal with padding, bidirectional with packed
segments, with and without the query's own key), chunked == reference over block sizes, the
defining properties (weights >= 0 summing to 1 - the stick left, a key's weight a function of
the logits between it and the query only, no dependence on where the sequence starts), the
O(L x block) memory of the chunked path, the refusals, the bad fields and the listing."""

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
H, D = 2, 16  # D >= L: one-hot values read the weights off the output
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=512)
TOL = dict(rtol=2e-5, atol=2e-6)


def scheme_for(causal, attend_current=False):
    return positions.make("stick_breaking", attend_current=attend_current).bind(
        dataclasses.replace(DIMS, causal=causal))


def direct_weights(q, k, pos, allowed, causal, attend_current):
    """A [B, H, L, L] from the definition: on each side of query i (keys at or before it;
    bidirectional also at or after it), key j gets beta_ij times (1 - beta_im) for every key
    m of that side strictly nearer to i (by position), the query's own key counted only with
    attend_current; each of two sides holds half the stick. Which keys break whose stick is
    worked out in NumPy, pair by pair; the weight is then one plain product over keys."""
    beta = jax.nn.sigmoid(jnp.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(D))
    pos = np.asarray(pos)
    rel = pos[:, None, :] - pos[:, :, None]  # [B, i, j]: key j's position minus query i's
    w = 0.0
    for before in ((True,) if causal else (True, False)):
        on_side = (rel <= 0) if before else (rel >= 0)
        usable = allowed & on_side & (attend_current | (rel != 0))  # [B, i, j]
        # use[b, i, j, m]: key m breaks the stick before key j gets its share
        use = usable[:, :, None, :] & (np.abs(rel)[:, :, None, :] < np.abs(rel)[:, :, :, None])
        stick = jnp.prod(jnp.where(use[:, None], 1 - beta[:, :, :, None, :], 1.0), axis=-1)
        w = w + jnp.where(usable[:, None], beta * stick, 0.0) / (1 if causal else 2)
    return w


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    # Logits of a few units: sigmoids spread over (0, 1), so every stick is visibly used.
    q, k = (jnp.asarray(2.5 * rng.randn(B, L, H, D), jnp.float32) for _ in range(2))
    v, ct = (jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(2))
    return q, k, v, ct


@pytest.mark.slow
@pytest.mark.parametrize("attend_current", [False, True], ids=["strict", "attend_current"])
@pytest.mark.parametrize("case", [0, 1], ids=["causal_padded", "bidirectional_packed"])
def test_matches_the_definition_values_and_grads_on_every_path(case, attend_current):
    causal, kw, pos, allowed = attention_cases.padded_and_packed()[case]
    q, k, v, ct = _inputs(case)
    scheme = scheme_for(causal, attend_current)
    pos_j = jnp.asarray(pos, jnp.int32)

    def mine(q, k, v):
        a = direct_weights(q, k, pos, allowed, causal, attend_current)
        return jnp.einsum("bhij,bjhd->bihd", a, v)

    def ours(impl):
        return lambda q, k, v: attend(q, k, v, scheme=scheme, q_pos=pos_j, k_pos=pos_j,
                                      causal=causal, implementation=impl, block_q=4,
                                      block_k=4, **kw)

    def both(f):
        return jax.jit(lambda: (f(q, k, v), jax.grad(lambda *a: (f(*a) * ct).sum(),
                                                     (0, 1, 2))(q, k, v)))()

    want, want_grads = both(mine)
    assert float(jnp.abs(want).max()) > 0.1  # the sticks carry weight
    for impl in ("reference", "chunked", "rows", "lean"):
        got, grads = both(ours(impl))
        np.testing.assert_allclose(got, want, err_msg=impl, **TOL)
        for name, a, b in zip(("dq", "dk", "dv"), grads, want_grads):
            np.testing.assert_allclose(a, b, err_msg=f"{impl} {name}", **TOL)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_chunked_equals_reference_over_block_sizes_with_padding(causal):
    length = 37
    rng = np.random.RandomState(3)
    q, k = (jnp.asarray(2.0 * rng.randn(B, length, H, D), jnp.float32) for _ in range(2))
    v, ct = (jnp.asarray(rng.randn(B, length, H, D), jnp.float32) for _ in range(2))
    kv_mask = jnp.asarray(np.arange(length)[None] < np.array([[length], [29]]))
    scheme = scheme_for(causal, attend_current=True)

    def run(impl, bq=16, bk=16, window=None):
        def f(q, k, v):
            return attend(q, k, v, scheme=scheme, kv_mask=kv_mask, causal=causal,
                          implementation=impl, block_q=bq, block_k=bk, window=window)
        return jax.jit(lambda: (f(q, k, v), jax.grad(lambda *a: (f(*a) * ct).sum(),
                                                     (0, 1, 2))(q, k, v)))()

    # A local layer (window 9) walks only its band of key blocks, still outward.
    for window, blocks in ((None, ((16, 16), (5, 7), (37, 3), (8, 64))), (9, ((4, 4),))):
        want, want_grads = run("reference", window=window)
        for bq, bk in blocks:
            got, grads = run("chunked", bq, bk, window)
            msg = f"{bq}x{bk} window {window}"
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=msg)
            for a, b in zip(grads, want_grads):
                np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=msg)


def _weights(scheme, q, k, causal, impl="reference", **kw):
    """The attention weights [B, H, L, L], read off the output with one-hot values."""
    eye = jnp.broadcast_to(jnp.eye(L, D)[None, :, None, :], (B, L, H, D))
    out = attend(q, k, eye, scheme=scheme, causal=causal, implementation=impl, block_q=4,
                 block_k=4, **kw)
    return jnp.moveaxis(out[..., :L], 2, 1)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("attend_current", [False, True], ids=["strict", "attend_current"])
def test_weights_are_a_stick_and_the_rest_is_what_is_left(causal, attend_current):
    q, k, _, _ = _inputs(4)
    scheme = scheme_for(causal, attend_current)
    z = np.asarray(jnp.einsum("bihd,bjhd->bhij", q, k), np.float64) / math.sqrt(D)
    rest = 1 / (1 + np.exp(z))  # 1 - beta
    ar = np.arange(L)
    own = (ar[None, :] == ar[:, None]) if attend_current else False
    left = np.where((ar[None, :] < ar[:, None]) | own, rest, 1.0).prod(-1)
    right = np.where((ar[None, :] > ar[:, None]) | own, rest, 1.0).prod(-1)
    left_over = left if causal else (left + right) / 2  # the stick no key took
    for impl in ("reference", "chunked"):
        w = np.asarray(_weights(scheme, q, k, causal, impl))
        assert (w >= 0).all()
        np.testing.assert_allclose(w.sum(-1), 1 - left_over, rtol=1e-5, atol=1e-6)
        assert (w.sum(-1) <= 1 + 1e-6).all()
        if not attend_current:
            assert (np.diagonal(w, axis1=-2, axis2=-1) == 0).all()
    w = np.asarray(_weights(scheme, q, k, causal))
    if causal:  # the first query has no key before it: all of its stick is left
        assert (w[:, :, 0, 1:] == 0).all()


def test_a_keys_weight_reads_only_the_logits_between_it_and_the_query():
    q, k, _, _ = _inputs(5)
    scheme = scheme_for(causal=False)
    base = np.asarray(_weights(scheme, q, k, causal=False))
    m = 5  # change one key: every logit z_im changes
    k2 = k.at[:, m].set(-k[:, m])
    moved = np.asarray(_weights(scheme, q, k2, causal=False))
    ar = np.arange(L)
    i, j = ar[:, None], ar[None, :]
    between = (np.minimum(i, j) < m) & (m < np.maximum(i, j))
    untouched = ~between & (j != m)
    np.testing.assert_allclose(moved[..., untouched], base[..., untouched], rtol=1e-6, atol=0)
    # ...and it does move the keys beyond it, by the factor its own break changed
    assert np.abs(moved[..., between] - base[..., between]).max() > 1e-3


def test_shifting_every_position_changes_nothing():
    q, k, v, _ = _inputs(6)
    kv_mask = jnp.asarray(np.arange(L)[None] < np.array([[L], [8]]))
    for causal in (True, False):
        scheme = scheme_for(causal, attend_current=True)
        for impl in ("reference", "chunked"):
            outs = [attend(q, k, v, scheme=scheme, causal=causal, kv_mask=kv_mask,
                           q_pos=jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32) + s, (B, L)),
                           k_pos=jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32) + s, (B, L)),
                           implementation=impl, block_q=4, block_k=4)
                    for s in (0, 300)]
            np.testing.assert_array_equal(outs[0], outs[1])


def test_chunked_never_builds_a_full_weights_array():
    # Forward and backward of both sides at L=256, blocks of 32: nothing as large as the
    # [B, H, L, L] weights (a tile is 64x smaller).
    length = 256
    rng = np.random.RandomState(7)
    q, k, v = (jnp.asarray(rng.randn(B, length, H, D), jnp.float32) for _ in range(3))
    scheme = scheme_for(causal=False, attend_current=True)

    def loss(q, k, v):
        return attend(q, k, v, scheme=scheme, implementation="chunked", block_q=32,
                      block_k=32).sum()

    largest = attention_cases.largest_array(jax.grad(loss, argnums=(0, 1, 2)), q, k, v)
    assert largest < B * H * length * length // 8, largest


def test_refusals_bad_fields_and_listing():
    q, k, v, _ = _inputs(0)
    scheme = scheme_for(causal=True)
    for impl in ("kernel",):
        with pytest.raises(ConfigError, match="implementation") as err:
            attend(q, k, v, scheme=scheme, causal=True, implementation=impl)
        assert "\n" not in str(err.value) and "normalize" in str(err.value)
    with pytest.raises(ConfigError, match="sinks") as err:
        attend(q, k, v, scheme=scheme, causal=True, sinks=jnp.zeros((H,)))
    assert "\n" not in str(err.value)
    for value in (1, "yes", None):
        with pytest.raises(ConfigError, match="position.attend_current") as err:
            positions.make("stick_breaking", attend_current=value)
        assert "\n" not in str(err.value)
    assert "stick_breaking  (hooks: normalize)" in listing("schemes")
    assert "attend_current=False" in listing("schemes")
    assert not positions.scheme_class("stick_breaking").causal_only
