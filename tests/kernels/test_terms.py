"""The kernels' terms are an open set (posjax/kernels/terms/base.py): a scheme defined here,
outside the package, is fused by registering one `Term` for its class, with no change to
flash, vjp, layout or dispatch; and every built-in fused scheme resolves to its term."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import pytest

from posjax.kernels import supports
from posjax.kernels.cases import FUSED_CASES
from posjax.kernels.terms import REGISTRY, Built, Term, term_class, term_for
from posjax.kernels.terms.base import HEAD_SCALARS
from posjax.kernels.tile import add_at, head_scalar, tile_vjp, total
from posjax.positions import Dims, make
from posjax.positions.base import Scheme


def toy_bias(slope, rel):
    """-slope * |i - j| + 1/2: the toy's one formula (reference hook and kernel tile)."""
    return 0.5 - slope * jnp.abs(rel).astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class ToyLinear(Scheme):
    """A linear bias with one learned slope per head, unknown to posjax.kernels."""

    name: ClassVar[str] = "toy_linear"

    def init_layer(self, rng):
        return {"slope": 0.3 + jax.random.uniform(rng, (self.bound_dims.num_heads,))}

    def bias(self, params, q_pos, k_pos):
        rel = q_pos[:, None, :, None] - k_pos[:, None, None, :]
        return toy_bias(params["slope"][None, :, None, None], rel)


@dataclasses.dataclass(frozen=True)
class ToyTerm(Term):
    """The whole kernel side of ToyLinear: its array, the tile bias, the slope's gradient."""

    @classmethod
    def build(cls, scheme, call):
        return Built(cls(), {"hp": call.params["slope"][:, None]}, call.q, call.k)

    def inputs(self):
        return {"hp": HEAD_SCALARS}

    def grads(self):
        return {"hp": "dq"}

    def _formula(self, t):
        rel = t.qpos.astype(jnp.int32) - t.kpos.astype(jnp.int32)
        return lambda slope: toy_bias(slope, rel)

    def bias(self, r, t):
        return self._formula(t)(head_scalar(r["hp"], 0))

    def grad_step(self, pass_, r, t, ctx, grads):
        slope = jnp.full(t.dlog.shape, head_scalar(r["hp"], 0))
        (d_slope,) = tile_vjp(self._formula(t), (slope,), t.dlog)
        return {**grads, "hp": add_at(grads["hp"], 0, total(d_slope))}


@pytest.fixture
def toy_registered():
    term_for(ToyLinear)(ToyTerm)
    yield
    del REGISTRY[ToyLinear]


def test_toy_term_fused_values_and_grads(kc, toy_registered):
    # Causal, padded keys, packed segments, 40 tokens in blocks of 16: out, dq, dk, dv and
    # d slope of the kernel (interpret mode) equal the reference's, which differentiates the
    # scheme's bias hook.
    dims = Dims(num_heads=kc.H, head_dim=kc.D, hidden=kc.H * kc.D, max_length=64, causal=True)
    scheme = ToyLinear().bind(dims)
    assert supports(scheme)
    params = scheme.init_layer(jax.random.PRNGKey(3))
    q, k, v, cot = kc.inputs(2, 40, 40, jnp.float32, seed=61)
    seg = jnp.asarray([[1] * 26 + [2] * 14, [1] * 40], jnp.int32)
    kc.compare(scheme, params, q, k, v, cot, kc.F32_TOL, learnable=True, causal=True,
               segment_ids=(seg, seg), kv_mask=kc.mask(2, 40, [40, 35]))


def test_unregistered_scheme_is_not_fused():
    assert not supports(ToyLinear())  # the fixture above unregisters it
    with pytest.raises(ValueError, match="already has a fused term"):
        term_for(type(make("alibi")))(ToyTerm)


def test_every_case_resolves_to_a_term():
    for name, config in FUSED_CASES.items():
        scheme = make(config)
        assert (term_class(scheme) is None) == (not scheme.attention_hooks), name
