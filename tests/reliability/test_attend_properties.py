"""Property test (hypothesis, derandomized so CI is deterministic) over configs and input shapes
for posjax.attention.attend with real schemes: valid inputs give finite outputs, and the
chunked implementation matches the reference one; invalid inputs raise ConfigError (the
documented error type), never a shape error from inside jit.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from posjax import positions
from posjax.attention import attend
from posjax.errors import ConfigError
from posjax.positions.base import Dims

SCHEMES = ("none", "rope", "alibi", "t5", "nezha")
PROFILE = settings(max_examples=12, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw):
    name = draw(st.sampled_from(SCHEMES))
    heads = draw(st.sampled_from([1, 2]))
    head_dim = draw(st.sampled_from([2, 4, 8]))
    lq = draw(st.integers(1, 9))
    lk = draw(st.integers(1, 9))
    return dict(name=name, heads=heads, head_dim=head_dim, lq=lq, lk=lk,
                causal=draw(st.booleans()), pad=draw(st.integers(0, lk - 1)),
                block=draw(st.sampled_from([2, 4])), seed=draw(st.integers(0, 2**16)))


def _inputs(c):
    rng = np.random.default_rng(c["seed"])
    shape_q, shape_k = (1, c["lq"], c["heads"], c["head_dim"]), (1, c["lk"], c["heads"], c["head_dim"])
    q, k, v = (jnp.asarray(rng.standard_normal(s), jnp.float32) for s in (shape_q, shape_k, shape_k))
    kv_mask = jnp.arange(c["lk"])[None] < c["lk"] - c["pad"]  # trailing padding, >= 1 real key
    return q, k, v, kv_mask


@pytest.mark.slow
@PROFILE
@given(cases())
def test_valid_inputs_finite_and_chunked_matches_reference(c):
    dims = Dims(num_heads=c["heads"], head_dim=c["head_dim"], hidden=c["heads"] * c["head_dim"],
                max_length=64, vocab_size=32)
    scheme = None if c["name"] == "none" else positions.make(c["name"]).bind(dims)
    params = {} if scheme is None else scheme.init_layer(jax.random.PRNGKey(0))
    q, k, v, kv_mask = _inputs(c)
    kw = dict(scheme=scheme, causal=c["causal"], block_q=c["block"], block_k=c["block"])

    # Under jit, as the model calls it: one compile per example and implementation, where
    # eager execution compiles every primitive for every new shape (most of this test's time).
    def run(implementation):
        f = jax.jit(lambda q, k, v, params, kv_mask: attend(
            q, k, v, params=params, kv_mask=kv_mask, implementation=implementation, **kw))
        return np.asarray(f(q, k, v, params, kv_mask))

    ref, chunked = run("reference"), run("chunked")
    assert ref.shape == q.shape and np.isfinite(ref).all() and np.isfinite(chunked).all()
    np.testing.assert_allclose(chunked, ref, rtol=1e-4, atol=1e-5)


BAD = st.sampled_from(["k_heads", "k_dim", "q_pos_shape", "kv_mask_shape", "implementation",
                       "rope_odd_dim", "q_rank"])


@PROFILE
@given(cases(), BAD)
def test_invalid_inputs_raise_config_error(c, bad):
    q, k, v, kv_mask = _inputs(c)
    kw = dict(kv_mask=kv_mask, causal=c["causal"])
    if bad == "rope_odd_dim":
        dims = Dims(num_heads=2, head_dim=2 * c["head_dim"] + 1, hidden=2 * (2 * c["head_dim"] + 1),
                    max_length=64, vocab_size=32)
        with pytest.raises(ConfigError):
            positions.make("rope").check(dims, 64)
        return
    if bad == "k_heads":
        k = jnp.concatenate([k, k], axis=2)
    elif bad == "k_dim":
        k = jnp.concatenate([k, k], axis=3)
    elif bad == "q_pos_shape":
        kw["q_pos"] = jnp.zeros((1, c["lq"] + 1), jnp.int32)
    elif bad == "kv_mask_shape":
        kw["kv_mask"] = jnp.ones((1, c["lk"] + 1), bool)
    elif bad == "implementation":
        kw["implementation"] = "fastest"
    elif bad == "q_rank":
        q = q[0]
    with pytest.raises(ConfigError):
        attend(q, k, v, **kw)
