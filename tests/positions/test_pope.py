"""PoPE (polar coordinate position embeddings): attention against a direct complex-number
definition (values and gradients, the phase bias included), and its defining properties:
logits depend on positions only through their difference, and content never enters a phase."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import positions
from posjax.attention import attend
from posjax.errors import ConfigError
from posjax.positions.base import Dims
from posjax.positions.pope import pope_scores

B, L, H, D = 2, 7, 2, 6
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)
TOL = dict(rtol=2e-5, atol=2e-5)


def direct(q, k, v, delta, pos, base=10000.0):
    """softmax(Re[conj(q~) . k~] / sqrt(D)) v, q~ = softplus(q) e^{i t theta},
    k~ = softplus(k) e^{i (s theta + clip(delta))}, theta_c = base**(-c/D)."""
    theta = base ** (-np.arange(D) / D)
    ang = pos[..., None, None].astype(jnp.float32) * theta  # [B, L, 1, D]
    qc = jax.nn.softplus(q) * jnp.exp(1j * ang)
    kc = jax.nn.softplus(k) * jnp.exp(1j * (ang + jnp.clip(delta, -2 * np.pi, 0)))
    logits = jnp.real(jnp.einsum("bihd,bjhd->bhij", jnp.conj(qc), kc)) / np.sqrt(D)
    return jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits, -1), v)


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    q, k, v, ct = (jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))
    delta = jnp.asarray(rng.uniform(-7, 1, (H, D)), jnp.float32)  # some outside the clamp
    pos = jnp.asarray(np.sort(rng.choice(40, (B, L), replace=False), axis=1), jnp.int32)
    return q, k, v, ct, delta, pos


def test_matches_direct_definition_values_and_grads():
    q, k, v, ct, delta, pos = _inputs()
    scheme = positions.make("pope").bind(DIMS)
    ours = lambda impl: lambda q, k, v, d: attend(  # noqa: E731
        q, k, v, scheme=scheme, params={"delta": d}, q_pos=pos, k_pos=pos,
        implementation=impl, block_q=4, block_k=4)
    mine = lambda q, k, v, d: direct(q, k, v, d, pos)  # noqa: E731
    grads = lambda f: jax.grad(lambda *b: (f(*b) * ct).sum(), (0, 1, 2, 3))  # noqa: E731
    # chunked == reference (values and gradients) is in tests/attention/test_attend.py too.
    run = jax.jit(lambda *a: (ours("reference")(*a), ours("chunked")(*a), mine(*a),
                              grads(ours("reference"))(*a), grads(mine)(*a)))
    ref, chunked, want, ref_grads, want_grads = run(q, k, v, delta)
    for got in (ref, chunked):
        np.testing.assert_allclose(got, want, **TOL)
    for a, b in zip(ref_grads, want_grads):
        np.testing.assert_allclose(a, b, **TOL)


def test_relative_and_content_free_phases():
    q, k, _, _, delta, pos = _inputs(seed=1)
    scores = jax.jit(pope_scores, static_argnums=4)
    np.testing.assert_allclose(scores(q, k, pos, pos, 10000.0, delta),
                               scores(q, k, pos + 17, pos + 17, 10000.0, delta), **TOL)
    # Same position, no bias: no phase at all, the score is the magnitudes' dot product
    # (RoPE would still see the angles of q's and k's own pairs).
    same = scores(q, k, pos, pos, 10000.0, None)
    want = jnp.einsum("bihd,bihd->bhi", jax.nn.softplus(q), jax.nn.softplus(k))
    np.testing.assert_allclose(jnp.diagonal(same, axis1=-2, axis2=-1), want, **TOL)


@pytest.mark.parametrize("fields", [dict(base=1), dict(learn_bias="yes")])
def test_bad_fields(fields):
    with pytest.raises(ConfigError, match=f"position.{next(iter(fields))}"):
        positions.make("pope", **fields)
