"""PaTH attention (`path`): values and gradients against the definition written out as explicit
products of Householder matrices per (query, key) pair (causal with padding, bidirectional
with packed segments) on the reference, chunked and rows paths (lean runs the reference);
the UT-chunk scores against that definition over chunk sizes and key tiles (each tile's T
and w.k from `chunk_keys`); chunked == reference over block sizes, padding and a local window
(rows too); each key tile prepared once (`carried_keys`), not per query block; the
defining properties (beta = 0 is plain attention, the transforms are orthogonal at beta in
{0, 2} and not in between, a key is seen through the transforms of the tokens between it
and the query only, fla's decoding recurrence gives the causal logits, the encoder's
logits(q, k) = logits(k, q)^T, shifting positions changes nothing); O(L x (block + D +
chunk)) memory of chunked; gradients through the model into every layer's
params and the same numbers under a mesh; refusals, bad fields and the listing."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import positions
from posjax.__main__ import listing
from posjax.attention import attend, choose_implementation
from posjax.errors import ConfigError
from posjax.positions import path as path_module
from posjax.positions.base import Dims, Scheme
from posjax.tiling import sides
from tests.positions import attention_cases

B, L = attention_cases.B, attention_cases.L
H, D = 2, 4
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=512)
TOL = dict(rtol=2e-5, atol=2e-5)


def scheme_for(causal, **fields):
    fields = {"chunk": 3, **fields}  # chunks of 3: every tile holds several UT chunks
    return positions.make("path", **fields).bind(dataclasses.replace(DIMS, causal=causal))


def _params(scheme, beta_bias=None, seed=1):
    params = scheme.init_layer(jax.random.key(seed))
    params["beta_bias"] = 1.5 * jax.random.normal(jax.random.key(seed + 1), (H,))
    if beta_bias is not None:
        params["beta_bias"] = jnp.full((H,), beta_bias, jnp.float32)
    return params


def _inputs(seed=0, length=L):
    rng = np.random.RandomState(seed)
    return tuple(jnp.asarray(rng.randn(B, length, H, D), jnp.float32) for _ in range(4))


# -- the definition, written out --------------------------------------------------------------


def tokens(params, k, pos, conv_size=3, max_beta=2.0):
    """w [B, L, H, D] and beta [B, L, H]: w = l2norm(silu(sum_s conv[s] * (M k)_{t-s})) over
    the taps s whose token has position pos_t - s; beta = max_beta * sigmoid(u.k + b)."""
    z = jnp.einsum("blhd,hde->blhe", k, params["w_proj"])
    pos = np.asarray(pos)
    if conv_size > 1:
        out = []
        for t in range(k.shape[1]):
            acc = 0.0
            for s in range(conv_size):
                if t - s >= 0 and (pos[:, t - s] == pos[:, t] - s).all():
                    acc = acc + params["conv"][:, s] * z[:, t - s]
                elif t - s >= 0:  # taps differ per row: this row only
                    ok = jnp.asarray(pos[:, t - s] == pos[:, t] - s)[:, None, None]
                    acc = acc + jnp.where(ok, params["conv"][:, s] * z[:, t - s], 0.0)
            out.append(acc)
        z = jax.nn.silu(jnp.stack(out, 1))
    w = z / jnp.sqrt((z * z).sum(-1, keepdims=True) + 1e-6)
    gate = jnp.einsum("blhd,hd->blh", k, params["beta_proj"]) + params["beta_bias"]
    return w, max_beta * jax.nn.sigmoid(gate)


def direct_logits(q, k, w, beta, allowed, causal):
    """[B, H, L, L] raw logits from the definition: query i sees key j <= i through the
    matrix product H_i H_{i-1} ... H_{j+1} and (bidirectional) key j > i through
    H_{i+1} ... H_j, H_t = I - beta_t w_t w_t^T, where a token t the query may not attend
    (allowed[b, i, t] False: padding, another example) counts as I. Built from explicit
    [D, D] matrices, all queries at once per distance."""
    eye = jnp.eye(D)
    hh = eye - beta[..., None, None] * w[..., :, None] * w[..., None, :]  # [B, L, H, D, D]
    length = q.shape[1]
    ar = np.arange(length)
    mats = {0: jnp.broadcast_to(eye, (B, length, H, D, D))}  # mats[d][b, i] = M(i, i + d)
    for sign in ((-1,) if causal else (-1, 1)):
        m = mats[0]
        for d in range(1, length):
            # before (sign -1): M(i, i-d) = M(i, i-d+1) H_{i-d+1}; after: M(i, i+d-1) H_{i+d}
            t = np.clip(ar - d + 1 if sign < 0 else ar + d, 0, length - 1)
            ok = jnp.asarray(allowed[:, ar, t])[:, :, None, None, None]
            m = jnp.einsum("bihxy,bihyz->bihxz", m, jnp.where(ok, hh[:, t], eye))
            mats[sign * d] = m
    out = jnp.zeros((B, H, length, length))
    for d, m in mats.items():
        j = ar + d
        ok = (j >= 0) & (j < length)
        jc = np.clip(j, 0, length - 1)
        s = jnp.einsum("bihx,bihxy,bihy->bhi", q, m, k[:, jc])
        out = out.at[:, :, ar[ok], jc[ok]].set(s[:, :, ok])
    return out


def direct_attention(q, k, v, params, pos, allowed, causal):
    w, beta = tokens(params, k, pos)
    z = direct_logits(q, k, w, beta, allowed, causal) / math.sqrt(D)
    z = jnp.where(allowed[:, None], z, -1e30)
    p = jnp.where(allowed[:, None], jax.nn.softmax(z, -1), 0.0)
    return jnp.einsum("bhij,bjhd->bihd", p, v)


# -- the UT chunks against the definition (no attention around them) --------------------------


def _random_tokens(seed, length=L, beta=None):
    rng = np.random.RandomState(seed)
    w = rng.randn(B, length, H, D)
    w /= np.linalg.norm(w, axis=-1, keepdims=True)
    b = rng.uniform(0, 2, (B, length, H)) if beta is None else np.full((B, length, H), beta)
    return jnp.asarray(w, jnp.float32), jnp.asarray(b, jnp.float32)


@functools.partial(jax.jit, static_argnums=(4, 5))
def _hook_rows(q, k, w, beta, causal, chunk):
    """The scheme's raw scores over whole rows, as the reference path gets them."""
    scheme = scheme_for(causal, chunk=chunk)
    tok = sides.carried_keys(scheme, {}, k, jnp.concatenate([w, beta[..., None]], -1))
    pos = jnp.broadcast_to(jnp.arange(q.shape[1], dtype=jnp.int32), q.shape[:2])
    return sides.carried_rows(scheme, {}, q, k, None, tok, None, pos, pos, causal)


def _direct(q, k, w, beta, causal):
    """direct_logits of unmasked rows, jitted."""
    allowed = np.ones((B, q.shape[1], q.shape[1]), bool)
    return jax.jit(lambda *a: direct_logits(*a, allowed, causal))(q, k, w, beta)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_ut_chunks_and_carried_tiles_give_the_definition(causal):
    q, k, _, _ = _inputs(0)
    w, beta = _random_tokens(0)
    want = np.asarray(_direct(q, k, w, beta, causal))
    if causal:
        want = np.where(np.tril(np.ones((L, L), bool)), want, 0.0)
    for chunk in (1, 4):  # 1: a chunk per key; 4: the last chunk padded
        got = _hook_rows(q, k, w, beta, causal, chunk)
        np.testing.assert_allclose(got, want, err_msg=f"chunk {chunk}", **TOL)

    @jax.jit
    def tiled(q, k, tok):
        # Key tiles of 4, 3, 4 walked outward per side with the carry, chunks of 2.
        pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
        out = 0.0
        for before in sides.sides(causal):
            own = sides.side_mask(None, pos, pos, before, shared=False)
            state, cols = q, {}
            for a, b in ((0, 4), (4, 7), (7, L))[::-1] if before else ((0, 4), (4, 7), (7, L)):
                keys = path_module.chunk_keys(k[:, a:b], tok[:, a:b], 2)  # per key tile
                cols[a], state = path_module.transport_scores(state, k[:, a:b], keys,
                                                              own[..., a:b], before, 2)
            out = out + jnp.where(own, jnp.concatenate([cols[a] for a in (0, 4, 7)], -1), 0.0)
        return out

    got = tiled(q, k, jnp.concatenate([w, beta[..., None]], -1))
    np.testing.assert_allclose(got, want, **TOL)


def test_causal_logits_are_flas_decoding_recurrence():
    # fla's decoding step: each new token t first updates every cached key by its H_t
    # (k <- k - beta_t (k.w_t) w_t), then attends to the cache and its own key, untouched.
    q, k, _, _ = _inputs(1)
    w, beta = _random_tokens(1)
    qn, kn, wn, bn = (np.asarray(x, np.float64) for x in (q, k, w, beta))
    want = np.zeros((B, H, L, L))
    cache = np.zeros((B, 0, H, D))
    for t in range(L):
        proj = (cache * wn[:, t:t + 1]).sum(-1, keepdims=True)
        cache = cache - bn[:, t:t + 1, :, None] * proj * wn[:, t:t + 1]
        cache = np.concatenate([cache, kn[:, t:t + 1]], 1)
        want[:, :, t, :t + 1] = np.einsum("bhd,bjhd->bhj", qn[:, t], cache)
    got = _hook_rows(q, k, w, beta, True, 4)
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("beta,orthogonal", [(0.0, True), (2.0, True), (1.0, False)])
def test_the_transforms_are_orthogonal_at_beta_0_and_2(beta, orthogonal):
    # D basis queries at the last token read the whole transported key column by column:
    # raw[a, j] = (M_j k_j)[a]; |M_j k_j| = |k_j| for every key iff M_j is orthogonal here.
    _, k, _, _ = _inputs(2)
    w, b = _random_tokens(2, beta=beta)
    tok = path_module.chunk_keys(k, jnp.concatenate([w, b[..., None]], -1), 4)
    basis = jnp.broadcast_to(jnp.eye(D)[None, :, None, :], (B, D, H, D))
    mask = jnp.ones((B, 1, D, L), bool)  # every key before the (last-token) queries
    raw, _ = path_module.transport_scores(basis, k, tok, mask, True, 4)
    norms = np.linalg.norm(np.asarray(raw), axis=2)  # [B, H, L]
    want = np.linalg.norm(np.asarray(k), axis=-1).transpose(0, 2, 1)
    if orthogonal:
        np.testing.assert_allclose(norms, want, rtol=1e-5)
    else:  # projections: no key grows, and the keys before the last one shrink
        assert (norms <= want + 1e-5).all()
        assert (norms[..., :-1] < want[..., :-1] - 1e-3).mean() > 0.9


def test_beta_zero_is_plain_attention_and_shifts_change_nothing():
    q, k, v, _ = _inputs(3)
    kv_mask = jnp.asarray(np.arange(L)[None] < np.array([[L], [8]]))

    def run(scheme, params, shift, causal):
        pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32) + shift, (B, L))
        return attend(q, k, v, scheme=scheme, params=params, q_pos=pos, k_pos=pos,
                      causal=causal, kv_mask=kv_mask, implementation="reference")

    @jax.jit
    def runs(shift):
        out = {}
        for causal in (True, False):
            scheme = scheme_for(causal)
            out[causal] = (run(scheme, _params(scheme, beta_bias=-1e4), 0, causal),
                           run(None, None, 0, causal))
        scheme = scheme_for(False)
        return out, run(scheme, _params(scheme), 0, False), run(scheme, _params(scheme), shift,
                                                                 False)

    out, unmoved, moved = runs(300)
    for zero, plain in out.values():
        np.testing.assert_allclose(zero, plain, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(unmoved, moved, rtol=1e-6, atol=1e-6)
    assert np.abs(np.asarray(unmoved - out[False][1])).max() > 1e-2  # beta > 0 does move it


def test_the_encoder_sees_each_pair_through_one_matrix_and_its_transpose():
    # logits(q, k) = logits(k, q)^T: the matrix between tokens a < b is H_{a+1} ... H_b seen
    # from a, its transpose seen from b.
    q, k, _, _ = _inputs(4)
    w, beta = _random_tokens(4)
    qk = np.asarray(_hook_rows(q, k, w, beta, False, 4))
    kq = np.asarray(_hook_rows(k, q, w, beta, False, 4))
    np.testing.assert_allclose(qk, np.swapaxes(kq, -1, -2), **TOL)


def test_a_key_is_seen_through_the_tokens_between_only():
    q, k, _, _ = _inputs(5)
    w, beta = _random_tokens(5)
    base = np.asarray(_hook_rows(q, k, w, beta, False, 4))
    m = 5  # change token m's transform only
    moved = np.asarray(_hook_rows(q, k, w.at[:, m].set(-w[:, m] + 0.3), beta.at[:, m].set(0.7),
                                  False, 4))
    ar = np.arange(L)
    i, j = ar[:, None], ar[None, :]
    # H_m is between i and j when it is one of H_{min+1..max}
    between = (np.minimum(i, j) < m) & (m <= np.maximum(i, j))
    np.testing.assert_allclose(moved[..., ~between], base[..., ~between], rtol=1e-6, atol=1e-6)
    assert np.abs(moved[..., between] - base[..., between]).min() > 0


# -- attention paths -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("case", [0, 1], ids=["causal_padded", "bidirectional_packed"])
def test_matches_the_definition_values_and_grads_on_every_path(case):
    causal, kw, pos, allowed = attention_cases.padded_and_packed()[case]
    q, k, v, ct = _inputs(case)
    scheme = scheme_for(causal)
    params = _params(scheme)
    pos_j = jnp.asarray(pos, jnp.int32)

    def mine(q, k, v, params):
        return direct_attention(q, k, v, params, pos, allowed, causal)

    def ours(impl):
        return lambda q, k, v, params: attend(
            q, k, v, scheme=scheme, params=params, q_pos=pos_j, k_pos=pos_j, causal=causal,
            implementation=impl, block_q=4, block_k=4, **kw)

    def both(f):
        return f(q, k, v, params), jax.grad(lambda *a: (f(*a) * ct).sum(),
                                            (0, 1, 2, 3))(q, k, v, params)

    # lean runs the reference for it (the same program): not compiled twice
    assert choose_implementation("lean", scheme, L) == "reference"
    impls = ("reference", "chunked", "rows")
    results = jax.jit(lambda: [both(mine)] + [both(ours(i)) for i in impls])()
    want, want_grads = results[0]
    for impl, (got, grads) in zip(impls, results[1:]):
        np.testing.assert_allclose(got, want, err_msg=impl, **TOL)
        for name, a, b in zip(("dq", "dk", "dv", "dparams"), grads, want_grads):
            for leaf_a, leaf_b in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
                np.testing.assert_allclose(leaf_a, leaf_b, err_msg=f"{impl} {name}", **TOL)
    # every parameter is reached (w through the conv, beta through its gate)
    assert all(np.abs(np.asarray(g)).max() > 0 for g in jax.tree.leaves(want_grads[3]))


@pytest.mark.slow
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_chunked_equals_reference_over_block_sizes_with_padding(causal):
    length = 37
    q, k, v, ct = _inputs(6, length)
    kv_mask = jnp.asarray(np.arange(length)[None] < np.array([[length], [29]]))
    scheme = scheme_for(causal, chunk=5)
    params = _params(scheme)

    def run(impl, bq=16, bk=16, window=None):
        def f(q, k, v, params):
            return attend(q, k, v, scheme=scheme, params=params, kv_mask=kv_mask,
                          causal=causal, implementation=impl, block_q=bq, block_k=bk,
                          window=window)
        return f(q, k, v, params), jax.grad(lambda *a: (f(*a) * ct).sum(),
                                            (0, 1, 2, 3))(q, k, v, params)

    # Key blocks of 7, 3 and 5 against chunks of 5: each block's UT chunks (carried_keys)
    # start at its first key, the last one padded. A local layer (window 9) walks only its
    # band of key blocks, still outward (rows: its band flattened, prepared per query block).
    cases = [("chunked", None, (5, 7)), ("chunked", None, (37, 3)), ("chunked", None, (8, 5)),
             ("chunked", 9, (4, 4)), ("rows", 9, (4, 4))]
    results = jax.jit(lambda: ([run("reference", window=wd) for wd in (None, 9)],
                               [run(impl, *bl, wd) for impl, wd, bl in cases]))()
    for (impl, window, blocks), (got, grads) in zip(cases, results[1]):
        want, want_grads = results[0][window is not None]
        msg = f"{impl} {blocks} window {window}"
        np.testing.assert_allclose(got, want, err_msg=msg, **TOL)
        for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
            np.testing.assert_allclose(a, b, err_msg=msg, **TOL)


CALLS = []  # the key tiles Counted.carried_keys ran on, as the forward ran


@dataclasses.dataclass(frozen=True)
class Counted(path_module.Path):
    """PaTH recording the shape of every key tile its carried_keys runs on."""

    def carried_keys(self, params, k, k_tok):
        jax.debug.callback(lambda x: CALLS.append(np.shape(x)), k[:, :, 0, 0])
        return super().carried_keys(params, k, k_tok)


def test_each_key_tile_is_prepared_once_not_per_query_block():
    # 24 tokens in query blocks of 4: rows prepares the whole key rows once, chunked each of
    # its 3 key blocks of 8 once (per query block would be 6 and 18 calls).
    q, k, v, _ = _inputs(0, 24)
    scheme = Counted(chunk=3).bind(DIMS)
    params = _params(scheme)
    for impl, tiles in (("rows", [(B, 24)]), ("chunked", [(B, 8)] * 3)):
        CALLS.clear()
        jax.block_until_ready(jax.jit(lambda q, k, v, p: attend(
            q, k, v, scheme=scheme, params=p, implementation=impl, block_q=4, block_k=8))(
                q, k, v, params))
        assert CALLS == tiles, impl


def test_chunked_never_builds_a_full_logits_array():
    # Forward and backward of both sides at L=256, blocks of 32: nothing as large as the
    # [B, H, L, L] logits (a tile is 64x smaller); the largest arrays are the keys' per-token
    # ones, (w, beta) and their rows of the chunk's T and w.k: O(L x (D + chunk)).
    length, chunk = 256, 8
    q, k, v, _ = _inputs(7, length)
    scheme = scheme_for(causal=False, chunk=chunk)
    params = _params(scheme)

    def loss(q, k, v, params):
        return attend(q, k, v, scheme=scheme, params=params, implementation="chunked",
                      block_q=32, block_k=32).sum()

    largest = attention_cases.largest_array(jax.grad(loss, argnums=(0, 1, 2, 3)), q, k, v,
                                            params)
    assert largest <= B * length * H * (D + 1 + 2 * chunk) < B * H * length * length // 8, largest


@pytest.mark.slow
def test_every_layer_learns_through_the_model_and_a_mesh_changes_nothing():
    from flax import nnx

    from posjax import models
    from posjax.mesh_rules import PRESETS
    from tests.models.support import layer_hook_grads, make_batch, model_config

    config = model_config({"name": "path"})
    batch = make_batch(segments=[9, 7])
    for tree in layer_hook_grads(config, batch):
        for name, g in tree.items():
            assert np.abs(np.asarray(g)).max() > 0, name
    ref = models.build_model(config, nnx.Rngs(0))(batch)["mlm_logits"]
    mesh = jax.make_mesh((1, 1, 1), ("data", "fsdp", "tensor"),
                         axis_types=(jax.sharding.AxisType.Auto,) * 3)
    with jax.set_mesh(mesh), nnx.logical_axis_rules(PRESETS["fsdp_tp"]):
        model = models.build_model(config, nnx.Rngs(0))
        out = nnx.jit(lambda m, b: m(b)["mlm_logits"])(model, batch)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


# -- refusals, fields, listing --------------------------------------------------------------


def test_refusals_bad_fields_and_listing():
    q, k, v, _ = _inputs(0)
    scheme = scheme_for(causal=True)
    params = _params(scheme)
    with pytest.raises(ConfigError, match="implementation") as err:
        attend(q, k, v, scheme=scheme, params=params, causal=True, implementation="kernel")
    assert "\n" not in str(err.value) and "carried_scores" in str(err.value)
    with pytest.raises(ConfigError, match="q.shape") as err:  # cross-attention: no w per query
        attend(q[:, :5], k, v, scheme=scheme, params=params, causal=True)
    assert "\n" not in str(err.value) and "self-attention" in str(err.value)
    for field, value in (("conv_size", 0), ("conv_size", 2.5), ("chunk", 0), ("chunk", True),
                         ("max_beta", 0), ("max_beta", 2.5), ("max_beta", "2")):
        with pytest.raises(ConfigError, match=f"position.{field}") as err:
            positions.make("path", **{field: value})
        assert "\n" not in str(err.value)
    assert "path  (hooks: prepare, carried_scores, carried_keys)" in listing("schemes")

    class KeysAlone(Scheme):  # the companion without carried_scores
        def carried_keys(self, params, k, k_tok):
            return k_tok

    with pytest.raises(ConfigError, match="scheme") as err:
        attend(q, k, v, scheme=KeysAlone().bind(DIMS), causal=True)
    assert "\n" not in str(err.value) and "carried_keys" in str(err.value)
    assert "conv_size=3, max_beta=2.0, chunk=64" in listing("schemes")
    assert not positions.scheme_class("path").causal_only
