"""DAPE (`dape`): attention against the equation written out here (values and gradients, every
learned parameter included, on the reference, chunked, rows and lean paths, causal and
bidirectional with padding, each base: ALiBi, KERPLE, FIRE); the defining properties (with the
MLP's output zeroed it is exactly its base scheme; the MLP reads every head of a pair, and
only that pair); padding keys that change nothing; the kernel's fallback; bad fields; the
listing; every layer's parameters learning through the model."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import kernels, positions
from posjax.__main__ import listing
from posjax.attention import attend, choose_implementation
from posjax.errors import ConfigError
from posjax.positions.base import Dims

B, L, H, D, W = 2, 11, 2, 8, 6
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)
TOL = dict(rtol=2e-5, atol=2e-5)
PATHS = ("reference", "chunked", "rows", "lean")
BASES = ("alibi", "kerple", "fire")


# -- the equation, written out -------------------------------------------------------------


def base_bias(base, p, pos):
    """The static bias b [B, H, L, L] of query position i and key position j, from each base
    paper's formula (not from posjax.positions)."""
    i = pos[:, :, None].astype(jnp.float32)
    j = pos[:, None, :].astype(jnp.float32)
    dist = jnp.abs(i - j)[:, None]  # [B, 1, L, L]
    if base == "alibi":  # Press et al.: slopes 2**(-8h/H), h = 1..H (H a power of two)
        slopes = jnp.asarray([2.0 ** (-8.0 * h / H) for h in range(1, H + 1)])
        return -slopes[None, :, None, None] * dist
    if base == "kerple":  # Chi et al., log variant: -r1 log(1 + r2 |i - j|)
        r1, r2 = p["r1"][None, :, None, None], p["r2"][None, :, None, None]
        return -r1 * jnp.log(1.0 + r2 * dist)
    # FIRE (Li et al.): MLP(psi(|i - j|) / psi(max(L, i))), psi(x) = log(|c x| + 1)
    psi = lambda x: jnp.log(jnp.abs(p["c"] * x) + 1.0)  # noqa: E731
    threshold = jnp.abs(p["L_multiplier"] * 512.0)
    x = psi(dist[:, 0]) / (psi(jnp.maximum(i, threshold)) + 1e-6)  # [B, L, L]
    hidden = jax.nn.relu(x[..., None] * p["w1"] + p["b1"])  # [B, L, L, 32]
    return jnp.moveaxis(hidden @ p["w2"] + p["b2"], -1, 1)


def direct(q, k, v, pos, params, base, allowed):
    """softmax over the allowed keys of x + b + f([x; b]) per (i, j) pair, x_ij = q_i . k_j /
    sqrt(D) and b_ij the base's bias, both H-vectors; f(z) = W2 leaky_relu(W1 z + c1) + c2."""
    x = jnp.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(D)
    b = base_bias(base, params.get("base"), pos)
    z = jnp.concatenate([x, b], axis=1)  # [B, 2H, L, L]: [logits of every head; biases]
    z = jnp.moveaxis(z, 1, -1)  # [B, L, L, 2H], one 2H-vector per pair
    hidden = z @ params["w1"] + params["b1"]
    hidden = jnp.where(hidden > 0, hidden, 0.01 * hidden)  # LeakyReLU, torch's slope
    f = jnp.moveaxis(hidden @ params["w2"] + params["b2"], -1, 1)  # [B, H, L, L]
    logits = jnp.where(allowed[:, None], x + b + f, -jnp.inf)
    return jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits, -1), v)


def _scheme(base="kerple", causal=False, **fields):
    return positions.make("dape", base=base, mlp_width=W, **fields).bind(
        dataclasses.replace(DIMS, causal=causal))


def _params(scheme, seed=0):
    params = scheme.init_layer(jax.random.key(seed))
    if scheme.base == "kerple":  # away from the straight-through clamp at eps
        params["base"] = {"r1": jnp.asarray([0.7, 1.3]), "r2": jnp.asarray([0.4, 0.9])}
    if scheme.base == "fire":  # a threshold below the positions, so max(L, i) moves
        params["base"]["L_multiplier"] = jnp.asarray(6.0 / 512.0)
    return params


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    return tuple(jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))


def _cases():
    """(causal, attend kwargs, positions, allowed [B, L, L]): row 1 has 4 padding keys."""
    ar = np.arange(L)
    kv_mask = ar[None] < np.array([L, 7])[:, None]
    pos = np.broadcast_to(ar, (B, L))
    causal_allowed = (ar[None, None, :] <= ar[None, :, None]) & kv_mask[:, None, :]
    bidi_allowed = np.broadcast_to(kv_mask[:, None, :], (B, L, L))
    return [(True, dict(kv_mask=jnp.asarray(kv_mask)), pos, causal_allowed),
            (False, dict(kv_mask=jnp.asarray(kv_mask)), pos, bidi_allowed)]


def _run(f, q, k, v, params, ct):
    return jax.jit(lambda: (f(q, k, v, params), jax.grad(
        lambda *a: (f(*a) * ct).sum(), (0, 1, 2, 3))(q, k, v, params)))()


@pytest.mark.slow
@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("case", [0, 1], ids=["causal_padded", "bidirectional_padded"])
def test_matches_the_equation_values_and_grads_on_every_path(base, case):
    causal, kw, pos, allowed = _cases()[case]
    scheme = _scheme(base, causal)
    params = _params(scheme, case)
    q, k, v, ct = _inputs(case)
    pos = jnp.asarray(pos, jnp.int32)

    def mine(q, k, v, p):
        return direct(q, k, v, pos, p, base, jnp.asarray(allowed))

    def ours(impl):
        return lambda q, k, v, p: attend(q, k, v, scheme=scheme, params=p, q_pos=pos,
                                         k_pos=pos, causal=causal, implementation=impl,
                                         block_q=4, block_k=4, **kw)

    want, want_grads = _run(mine, q, k, v, params, ct)
    outs = {}
    for impl in PATHS:
        got, grads = outs[impl] = _run(ours(impl), q, k, v, params, ct)
        np.testing.assert_allclose(got, want, err_msg=impl, **TOL)
        for name, a, b in zip(("dq", "dk", "dv"), grads[:3], want_grads[:3]):
            np.testing.assert_allclose(a, b, err_msg=f"{impl} {name}", **TOL)
        for path, a in jax.tree_util.tree_leaves_with_path(grads[3]):
            b = want_grads[3]
            for key in path:
                b = b[key.key]
            np.testing.assert_allclose(a, b, err_msg=f"{impl} d{jax.tree_util.keystr(path)}",
                                       **TOL)
    # every parameter learns: the MLP's and the base's (ALiBi has none)
    for path, g in jax.tree_util.tree_leaves_with_path(want_grads[3]):
        assert np.abs(np.asarray(g)).max() > 0, jax.tree_util.keystr(path)
    assert ("base" in params) == (base != "alibi")
    # the paths agree with each other more closely than with the written-out equation
    for impl in PATHS[1:]:
        np.testing.assert_allclose(outs[impl][0], outs["reference"][0], rtol=1e-5, atol=1e-6,
                                   err_msg=impl)


@pytest.mark.parametrize("base", BASES)
def test_with_the_mlp_output_zeroed_it_is_its_base_scheme_exactly(base):
    causal, kw, pos, _ = _cases()[0]
    scheme = _scheme(base, causal)
    params = _params(scheme)
    params["w2"] = jnp.zeros_like(params["w2"])
    params["b2"] = jnp.zeros_like(params["b2"])
    plain = positions.make(base).bind(scheme.dims)
    plain_params = params.get("base", {})
    assert plain.init_layer(jax.random.key(0)).keys() == plain_params.keys()
    q, k, v, _ = _inputs(3)
    pos = jnp.asarray(pos, jnp.int32)
    for impl in PATHS:
        def run(s, p):
            return jax.jit(lambda: attend(q, k, v, scheme=s, params=p, q_pos=pos, k_pos=pos,
                                          causal=causal, implementation=impl, block_q=4,
                                          block_k=4, **kw))()
        np.testing.assert_array_equal(run(scheme, params), run(plain, plain_params),
                                      err_msg=impl)


def test_the_mlp_reads_every_head_of_a_pair_and_only_that_pair():
    scheme = _scheme("kerple")
    params = _params(scheme)
    rng = np.random.RandomState(1)
    logits = jnp.asarray(rng.randn(B, H, 5, 7), jnp.float32)
    q_pos = jnp.broadcast_to(jnp.arange(3, 8, dtype=jnp.int32), (B, 5))
    k_pos = jnp.broadcast_to(jnp.arange(7, dtype=jnp.int32), (B, 7))
    out = scheme.map_logits(params, logits, q_pos, k_pos)
    assert out.shape == logits.shape and out.dtype == jnp.float32
    # head 0's logits move head 1's output at every pair
    moved = scheme.map_logits(params, logits.at[:, 0].add(0.5), q_pos, k_pos)
    assert np.all(np.asarray(moved[:, 1] != out[:, 1]))
    # one pair's logits move that pair's outputs only
    moved = scheme.map_logits(params, logits.at[1, :, 2, 3].add(0.5), q_pos, k_pos)
    changed = np.asarray((moved != out).any(1))
    assert changed[1, 2, 3] and changed.sum() == 1
    # through attention: head 0's queries reach head 1's output; the base scheme's do not
    q, k, v, _ = _inputs(4)
    q2 = q.at[:, :, 0].add(1.0)
    plain = positions.make("kerple").bind(DIMS)
    for s, p, reaches in ((scheme, params, True), (plain, params["base"], False)):
        a, b = (attend(x, k, v, scheme=s, params=p, implementation="reference")
                for x in (q, q2))
        assert bool(np.any(np.asarray(a[:, :, 1] != b[:, :, 1]))) == reaches, s.name


def test_padding_keys_change_nothing_and_masked_keys_stay_masked():
    """Junk in the padding keys (huge values) changes no output and no gradient of a real
    token, on every path; an MLP whose output pushes every logit up by 1e4 keeps them masked."""
    scheme = _scheme("fire")
    params = _params(scheme)
    params["b2"] = params["b2"] + 1e4
    q, k, v, ct = _inputs(5)
    real = np.arange(L)[None] < np.array([L, 7])[:, None]
    kv_mask = jnp.asarray(real)
    junk = jnp.asarray(~real)[:, :, None, None] * 1e3
    for impl in PATHS:
        def run(k, v):
            def f(q, k, v):
                return attend(q, k, v, scheme=scheme, params=params, kv_mask=kv_mask,
                              implementation=impl, block_q=4, block_k=4)
            return jax.jit(lambda: (f(q, k, v), jax.grad(lambda *a: (f(*a) * ct).sum(),
                                                         (0, 1, 2))(q, k, v)))()
        (out, grads), (out2, grads2) = run(k, v), run(k + junk, v - junk)
        assert np.all(np.isfinite(np.asarray(out)))
        np.testing.assert_allclose(out2, out, rtol=1e-5, atol=1e-5, err_msg=impl)
        for a, b in zip(grads, grads2):
            np.testing.assert_allclose(np.asarray(b)[real], np.asarray(a)[real], rtol=1e-5,
                                       atol=1e-5, err_msg=impl)
        for g in grads[1:]:  # dk, dv of the padding keys
            np.testing.assert_array_equal(np.asarray(g)[~real], 0.0, err_msg=impl)
        # the masked row 1 equals attention over its 7 real keys alone
        alone = attend(q[1:], k[1:, :7], v[1:, :7], scheme=scheme, params=params,
                       implementation="reference")
        np.testing.assert_allclose(out[1:], alone, rtol=1e-5, atol=1e-5, err_msg=impl)


def test_the_kernel_falls_back_to_chunked():
    scheme = _scheme()
    assert kernels.refusal(scheme) is None and not kernels.supports(scheme)
    assert choose_implementation("kernel", scheme, 64) == "chunked"


def test_bad_fields_one_line_and_listing():
    for field, values in (("base", ("t5", "ALiBi", "", None, 3)),
                          ("mlp_width", (0, -3, True, 2.5, "32", None))):
        for value in values:
            with pytest.raises(ConfigError, match=f"position.{field}") as err:
                positions.make("dape", **{field: value})
            assert "\n" not in str(err.value), str(err.value)
    with pytest.raises(ConfigError, match="position.variant"):
        positions.make("dape", variant="log")  # the base's fields are not DAPE's
    with pytest.raises(ConfigError, match="model.num_heads"):
        positions.make("dape").bind(dataclasses.replace(DIMS, num_heads=0))
    text = listing("schemes")
    assert "dape  (hooks: map_logits)" in text
    assert "base='kerple', mlp_width=32" in text
    assert positions.scheme_class("dape").offered_methods() == {"as_is": positions.AS_IS_DOC}


def test_parameters_and_defaults():
    scheme = positions.make("dape").bind(DIMS)
    assert (scheme.base, scheme.mlp_width) == ("kerple", 32)
    params = scheme.init_layer(jax.random.key(0))
    shapes = jax.tree.map(lambda x: x.shape, params)
    assert shapes == {"w1": (2 * H, 32), "b1": (32,), "w2": (32, H), "b2": (H,),
                      "base": {"r1": (H,), "r2": (H,)}}
    bound = 1 / math.sqrt(2 * H)  # torch.nn.Linear's init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert np.abs(np.asarray(params["w1"])).max() <= bound
    assert np.abs(np.asarray(params["w2"])).max() <= 1 / math.sqrt(32)
    assert "base" not in positions.make("dape", base="alibi").bind(DIMS).init_layer(
        jax.random.key(0))


@pytest.mark.slow
def test_every_layer_learns_its_mlp_and_base_through_the_model():

    from tests.models.support import layer_hook_grads, make_batch, model_config

    config = model_config({"name": "dape", "base": "fire", "mlp_width": 8})
    # two packed examples and 2 padding tokens
    for tree in layer_hook_grads(config, make_batch(segments=[9, 5])):
        for name in ("w1", "b1", "w2", "b2"):
            assert np.abs(np.asarray(tree[name])).max() > 0, name
        for name, g in tree["base"].items():
            assert np.abs(np.asarray(g)).max() > 0, name
