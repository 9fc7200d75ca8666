"""posjax.tiling.mixed: bf16 inputs with float32 accumulation, forward and backward."""

from __future__ import annotations

import jax
import pytest
import jax.numpy as jnp
import numpy as np

from posjax.tiling import mixed
from tests.numerics import assert_close_in_norm


def _dot_eqns(jaxpr):
    """Every dot_general equation of a jaxpr, nested jaxprs included."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            yield eqn
        for param in eqn.params.values():
            inner = getattr(param, "jaxpr", None)
            if inner is not None:
                yield from _dot_eqns(getattr(inner, "jaxpr", inner))


def _dots(jaxpr) -> list[tuple]:
    """(lhs dtype, rhs dtype, out dtype) of every dot_general, including nested jaxprs."""
    return [(*(str(v.aval.dtype) for v in eqn.invars), str(eqn.outvars[0].aval.dtype))
            for eqn in _dot_eqns(jaxpr)]


def test_bf16_einsum_backward_dots_are_bf16_and_gradients_match_float32():
    rng = np.random.default_rng(0)
    # Every product at least 8 wide: on CPU smaller ones run in float32 (see the next test).
    a = rng.normal(size=(2, 16, 3, 8)).astype(np.float32)
    b = rng.normal(size=(2, 12, 3, 8)).astype(np.float32)
    spec = "bqhd,bkhd->bhqk"

    def loss(a, b, dtype):
        out = mixed.einsum(spec, a.astype(dtype), b.astype(dtype))
        assert out.dtype == jnp.float32
        return jnp.sum(jnp.sin(out))

    grad = jax.grad(loss, argnums=(0, 1))
    g32 = grad(a, b, jnp.float32)
    g16 = grad(a, b, jnp.bfloat16)
    for x, y in zip(g16, g32):  # bf16 rounding of inputs and cotangent: ~1% of the norm
        x, y = np.asarray(x, np.float32), np.asarray(y)
        assert np.linalg.norm(x - y) < 0.03 * np.linalg.norm(y)
    # Forward and both backward products: bf16 operands, float32 results.
    dots = _dots(jax.make_jaxpr(lambda a, b: grad(a, b, jnp.bfloat16))(a, b).jaxpr)
    assert dots.count(("bfloat16", "bfloat16", "float32")) == 3, dots
    assert not [d for d in dots if d[:2] != ("bfloat16", "bfloat16")], dots


def test_contract_last_is_tensordot():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    w = rng.normal(size=(4, 5, 6)).astype(np.float32)
    assert_close_in_norm(mixed.contract_last(x, w, 2), np.tensordot(x, w, 2))


def test_products_ynnpack_declines_run_in_float32_on_cpu():
    # A vector (n = 1) and an all-small product: XLA:CPU could only run them in bf16 through
    # a runtime that raises, so mixed.einsum computes them in float32 there. They must RUN,
    # gradients included.
    if jax.default_backend() != "cpu":
        return
    cases = ((jnp.ones((4, 16), jnp.bfloat16), jnp.ones((16,), jnp.bfloat16), "mk,k->m"),
             (jnp.ones((4, 6), jnp.bfloat16), jnp.ones((6, 3), jnp.bfloat16), "mk,kn->mn"))
    for a, b, spec in cases:
        def loss(a, b, spec=spec):
            return jnp.sum(mixed.einsum(spec, a, b))
        assert _dots(jax.make_jaxpr(loss)(a, b).jaxpr) == [("float32", "float32", "float32")]
        ga, gb = jax.jit(jax.grad(loss, argnums=(0, 1)))(a, b)
        assert ga.dtype == a.dtype and gb.dtype == b.dtype
        n = b.shape[-1] if b.ndim > 1 else 1
        np.testing.assert_allclose(np.asarray(ga, np.float32), n)
        np.testing.assert_allclose(np.asarray(gb, np.float32), a.shape[0])


def _lhs_summed_last(jaxpr) -> list[bool]:
    """For every dot_general: whether one operand has its contracted axes last, batch axes
    aside (the lhs form YNNPACK takes on CPU)."""
    found = []
    for eqn in _dot_eqns(jaxpr):
        (ca, cb), (ba, bb) = eqn.params["dimension_numbers"]
        ok = []
        for x, c, b in ((eqn.invars[0], ca, ba), (eqn.invars[1], cb, bb)):
            rest = [i for i in range(x.aval.ndim) if i not in b]
            ok.append(set(rest[len(rest) - len(c):]) == set(c))
        found.append(any(ok))
    return found


@pytest.mark.slow
def test_float32_products_and_their_gradients_equal_einsum_with_a_summed_last_operand():
    # Dense forward/backward (the weight gradient sums over the tokens, first in both
    # operands), the attention products (batch axes in the middle), several summed axes.
    rng = np.random.default_rng(2)
    cases = (("ble,ef->blf", (2, 16, 8), (8, 12)),
             ("blhd,hde->ble", (2, 16, 3, 8), (3, 8, 10)),
             ("bqhd,bkhd->bhqk", (2, 16, 3, 8), (2, 12, 3, 8)),
             ("bhqk,bkhd->bqhd", (2, 3, 16, 12), (2, 12, 3, 8)),
             ("ne,ve->nv", (9, 8), (20, 8)),
             ("tm,tn->mn", (32, 8), (32, 12)))
    for spec, sa, sb in cases:
        a = rng.normal(size=sa).astype(np.float32)
        b = rng.normal(size=sb).astype(np.float32)
        w = rng.normal(size=jnp.einsum(spec, a, b).shape).astype(np.float32)

        def loss(a, b, f, spec=spec, w=w):
            return jnp.sum(f(spec, a, b) * w)

        ref = jax.grad(loss, argnums=(0, 1))(a, b, jnp.einsum)
        got = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(a, b, mixed.einsum)
        np.testing.assert_allclose(mixed.einsum(spec, a, b), jnp.einsum(spec, a, b),
                                   rtol=1e-5, atol=1e-5, err_msg=spec)
        for x, y in zip(got, ref):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5, err_msg=spec)
        jaxpr = jax.make_jaxpr(lambda a, b: jax.grad(loss, argnums=(0, 1))(
            a, b, mixed.einsum))(a, b).jaxpr
        if jax.default_backend() == "cpu":
            forms = _lhs_summed_last(jaxpr)
            assert len(forms) == 3 and all(forms), (spec, forms)
