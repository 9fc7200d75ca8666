"""CoPE (contextual positions): reference and chunked against a direct definition that sums
the gates between every query and key from their positions (values and gradients, causal and
bidirectional, with key padding), the defining property (positions count attended keys, not
tokens), and the refusals."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import models, positions
from posjax.attention import attend
from posjax.errors import ConfigError
from posjax.positions.base import Dims
from tests.models.support import model_config

B, L, H, D, NPOS = 2, 9, 2, 4, 6  # NPOS < L: the clamp at npos - 1 is reached
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)
TOL = dict(rtol=2e-5, atol=2e-5)


def direct(q, k, v, emb, pos, kv_mask, causal):
    """Every (i, j): p_ij = sum of gates over keys l whose position lies between key j and
    query i (both included), an explicit [i, j, l] indicator; then the interpolated table."""
    logits = jnp.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(D)
    allowed = kv_mask[:, None, None, :]
    if causal:
        allowed = allowed & (pos[:, None, :] <= pos[:, :, None])[:, None]
    g = jnp.where(allowed, jax.nn.sigmoid(logits), 0.0)
    pi, pj, pl = pos[:, :, None, None], pos[:, None, :, None], pos[:, None, None, :]
    between = (jnp.minimum(pi, pj) <= pl) & (pl <= jnp.maximum(pi, pj))  # [B, i, j, l]
    p = jnp.minimum(jnp.einsum("bhil,bijl->bhij", g, between.astype(jnp.float32)), NPOS - 1)
    side = jnp.broadcast_to((pj[..., 0] > pi[..., 0])[:, None], p.shape).astype(jnp.int32)
    lo = jnp.floor(p).astype(jnp.int32)
    hi = jnp.minimum(lo + 1, NPOS - 1)
    e_lo, e_hi = emb[side, lo], emb[side, hi]  # [B, H, i, j, D]
    w = p - lo
    z = jnp.einsum("bihd,bhijd->bhij", q, (1 - w)[..., None] * e_lo + w[..., None] * e_hi)
    logits = jnp.where(allowed, logits + z, -1e30)
    return jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits, -1), v)


def _inputs(seed=0, causal=False):
    rng = np.random.RandomState(seed)
    q, k, v, ct = (jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))
    emb = jnp.asarray(rng.randn(1 if causal else 2, NPOS, D), jnp.float32)
    pos = jnp.asarray(np.sort(rng.choice(30, (B, L), replace=False), axis=1), jnp.int32)
    kv_mask = jnp.asarray(np.arange(L)[None] < np.array([[L], [L - 3]]))
    return q, k, v, ct, emb, pos, kv_mask


@pytest.mark.slow
def test_matches_direct_definition_values_and_grads():
    # Gradients of the reference against the direct definition; chunked (blocks of 4, so the
    # gate sums cross key blocks) forward here (causal), its gradients against the reference
    # in tests/attention/test_attend.py (every registered scheme).
    def run(causal):
        q, k, v, ct, emb, pos, kv_mask = _inputs(causal=causal)
        scheme = positions.make("cope", npos=NPOS).bind(dataclasses.replace(DIMS, causal=causal))
        kw = dict(scheme=scheme, q_pos=pos, k_pos=pos, kv_mask=kv_mask, causal=causal,
                  block_q=4, block_k=4)
        ours = lambda impl: lambda q, k, v, e: attend(  # noqa: E731
            q, k, v, params={"emb": e}, implementation=impl, **kw)
        mine = lambda q, k, v, e: direct(q, k, v, e, pos, kv_mask, causal)  # noqa: E731
        grad = lambda f: jax.grad(lambda *a: (f(*a) * ct).sum(), (0, 1, 2, 3))  # noqa: E731
        # chunked forward causal only: bidirectionally it is compared with the reference,
        # values and gradients, in tests/attention/test_attend.py (registry case).
        chunked = ours("chunked") if causal else ours("reference")
        fn = jax.jit(lambda *a: (ours("reference")(*a), chunked(*a), mine(*a),
                                 grad(ours("reference"))(*a), grad(mine)(*a)))
        return fn(q, k, v, emb), kv_mask

    for causal in (True, False):
        (ref, chunked, want, grads, want_grads), kv_mask = run(causal)
        rows = np.asarray(kv_mask)[:, :, None, None]  # padded query rows: not compared
        for name, got in (("reference", ref), ("chunked", chunked)):
            np.testing.assert_allclose(np.where(rows, got, 0), np.where(rows, want, 0),
                                       err_msg=f"{name} causal={causal}", **TOL)
        for a, b in zip(grads, want_grads):
            np.testing.assert_allclose(a, b, err_msg=f"grads causal={causal}", **TOL)


def test_positions_count_attended_keys_not_tokens():
    # A masked key inserted between others shifts every later token position by one, yet no
    # other output changes: CoPE's positions count the gates of attended keys only.
    q, k, v, _, emb, pos, _ = _inputs(seed=1)
    scheme = positions.make("cope", npos=NPOS).bind(DIMS)
    params = {"emb": emb}
    run = jax.jit(lambda q, k, v, p, m: attend(q, k, v, scheme=scheme, params=params,
                                               q_pos=p, k_pos=p, kv_mask=m))
    base = run(q, k, v, pos, jnp.ones((B, L), bool))
    junk = jnp.full((B, 1, H, D), 3.0)
    ins = lambda x: jnp.concatenate([x[:, :4], junk, x[:, 4:]], axis=1)  # noqa: E731
    pos2 = jnp.asarray(np.arange(L + 1)[None].repeat(B, 0), jnp.int32)
    mask = jnp.asarray(np.arange(L + 1)[None].repeat(B, 0) != 4)
    out = run(ins(q), ins(k), ins(v), pos2, mask)
    keep = np.arange(L + 1) != 4
    np.testing.assert_allclose(out[:, keep], base, **TOL)


def test_kernel_path_and_bad_fields_are_refused():
    q, k, v, _, emb, pos, _ = _inputs()
    scheme = positions.make("cope").bind(DIMS)
    with pytest.raises(ConfigError, match="implementation='kernel'.*'cope'.*count_gates"):
        attend(q, k, v, scheme=scheme, params={"emb": emb}, implementation="kernel")
    with pytest.raises(ConfigError, match="model.attention='kernel'.*'cope'"):
        models.validate_model_config(model_config({"name": "cope"}, attention="kernel"))
    for bad in (1, 2.5, True, None):
        with pytest.raises(ConfigError, match="position.npos"):
            positions.make("cope", npos=bad)


def _sizes(jaxpr):
    for eqn in jaxpr.eqns:
        yield from (v.aval.size for v in eqn.outvars if hasattr(v.aval, "size"))
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                sub = getattr(sub, "jaxpr", sub)
                if hasattr(sub, "eqns"):
                    yield from _sizes(sub)


def test_chunked_memory_stays_o_l_times_block():
    # Forward and backward of chunked CoPE at L=256, blocks of 32 (traced, not compiled): no
    # intermediate is anywhere near the [B, H, L, L] logits.
    length, heads, dim = 256, 2, 4
    scheme = positions.make("cope").bind(Dims(num_heads=heads, head_dim=dim, hidden=8,
                                              max_length=length))
    q = jnp.zeros((1, length, heads, dim))
    params = {"emb": jnp.zeros((2, 64, dim))}

    def loss(q, k, v, params):
        return attend(q, k, v, scheme=scheme, params=params, implementation="chunked",
                      block_q=32, block_k=32).sum()

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2, 3)))(q, q, q, params)
    assert max(_sizes(jaxpr.jaxpr)) < heads * length * length // 8
