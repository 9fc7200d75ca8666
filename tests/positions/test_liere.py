"""LieRE (`liere`) and ComRoPE (`comrope`, variants 'ap' and 'ld'): attention against a
direct definition (block-diagonal D x D rotations from a Taylor-series exponential of the
generators written out as in the ComRoPE code; values and gradients, the generators
included, on the reference, chunked and rows paths), when the logits are relative (ComRoPE's
generators commute; LieRE's blocks of 4 do not, its blocks of 2 do), the errors and the
listing."""

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

B, L, H, D = 2, 9, 2, 8
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64)
TOL = dict(rtol=5e-5, atol=5e-5)
PATHS = ("reference", "chunked", "rows")
CASES = [("liere", {}), ("comrope", {"variant": "ap"}), ("comrope", {"variant": "ld"})]


def taylor_expm(a, order=40):
    out, term = jnp.eye(a.shape[-1]) + 0 * a, jnp.eye(a.shape[-1]) + 0 * a
    for n in range(1, order + 1):
        term = term @ a / n
        out = out + term
    return out


def written_generators(name, variant, params, b):
    """[H, 2, D/b, b, b] from the papers' definitions: LieRE A_a = F_a - F_a^T; ComRoPE-AP
    block j belongs to axis j mod 2; ComRoPE-LD A_a = theta_a (F - F^T)."""
    f = params["freqs"]
    if name == "liere":
        return f - jnp.swapaxes(f, -1, -2)
    s = f - jnp.swapaxes(f, -1, -2)  # [H, D/b, b, b]
    if variant == "ld":
        return jnp.stack([s * params["axis_scales"][a][None, :, None, None] for a in (0, 1)], 1)
    zero = jnp.zeros_like(s[:, 0])
    return jnp.stack([jnp.stack([s[:, j] if j % 2 == a else zero for j in range(D // b)], 1)
                      for a in (0, 1)], 1)


def direct(q, k, v, pos, gens):
    """softmax((R(p_i) q_i) . (R(p_j) k_j) / sqrt(D)) v, R(p) = blockdiag_n exp(r A_r,n +
    c A_c,n) as a full D x D matrix per token and head."""
    b = gens.shape[-1]
    p = pos.astype(jnp.float32)
    log_r = p[..., 0, None, None, None, None] * gens[None, None, :, 0] \
        + p[..., 1, None, None, None, None] * gens[None, None, :, 1]  # [B, L, H, n, b, b]
    blocks = taylor_expm(log_r)
    full = jnp.zeros(blocks.shape[:3] + (D, D))
    for n in range(D // b):
        full = full.at[..., n * b:(n + 1) * b, n * b:(n + 1) * b].set(blocks[..., n, :, :])
    qr = jnp.einsum("blhde,blhe->blhd", full, q)
    kr = jnp.einsum("blhde,blhe->blhd", full, k)
    logits = jnp.einsum("bihd,bjhd->bhij", qr, kr) / np.sqrt(D)
    return jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(logits, -1), v)


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    q, k, v, ct = (jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))
    pos = jnp.asarray(rng.randint(0, 6, (B, L, 2)), jnp.int32)
    return q, k, v, ct, pos


@pytest.mark.slow
@pytest.mark.parametrize("name,options", CASES, ids=["liere", "comrope_ap", "comrope_ld"])
def test_matches_direct_definition_values_and_grads_on_every_path(name, options):
    q, k, v, ct, pos = _inputs()
    scheme = positions.make(name, **options).bind(DIMS)
    params = scheme.init_layer(jax.random.key(1))
    variant = options.get("variant")

    def mine(q, k, v, p):
        return direct(q, k, v, pos, written_generators(name, variant, p, 4))

    def ours(impl):
        return lambda q, k, v, p: attend(q, k, v, scheme=scheme, params=p, q_pos=pos,
                                         k_pos=pos, implementation=impl, block_q=4, block_k=4)

    def both(f):
        return jax.jit(lambda: (f(q, k, v, params), jax.grad(
            lambda *x: (f(*x) * ct).sum(), (0, 1, 2, 3))(q, k, v, params)))()

    want, want_grads = both(mine)
    for impl in PATHS:
        got, grads = both(ours(impl))
        np.testing.assert_allclose(got, want, err_msg=impl, **TOL)
        for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
            np.testing.assert_allclose(a, b, err_msg=impl, **TOL)
    assert np.abs(np.asarray(want_grads[3]["freqs"])).max() > 0


def _rotated_logits(scheme):
    """(rotated q, logits) of `scheme` as one compiled program, compiled once for every
    position shift below (op by op, the rotations' exponentials took ~8 s a case)."""
    @jax.jit
    def rotated_logits(params, q, k, q_pos, k_pos):
        qr, kr = scheme.rotate(params, q, k, q_pos, k_pos)
        return qr, jnp.einsum("bihd,bjhd->bhij", qr, kr)

    return rotated_logits


@pytest.mark.parametrize("name,options,relative", [
    ("comrope", {"variant": "ap"}, True), ("comrope", {"variant": "ld"}, True),
    ("liere", {}, False), ("liere", {"block_size": 2}, True)])
def test_logits_are_relative_exactly_when_the_generators_commute(name, options, relative):
    q, k, _, _, pos = _inputs(1)
    scheme = positions.make(name, **options).bind(DIMS)
    params = jax.tree.map(lambda x: 2 * x, scheme.init_layer(jax.random.key(2)))
    g = np.asarray(scheme.generators(params), np.float64)  # [H, 2, n, b, b]
    commute = np.abs(g[:, 0] @ g[:, 1] - g[:, 1] @ g[:, 0]).max() / np.abs(g).max() ** 2
    np.testing.assert_allclose(g, -np.swapaxes(g, -1, -2), atol=1e-7)  # skew-symmetric
    rotated_logits = _rotated_logits(scheme)
    qr, base = rotated_logits(params, q, k, pos, pos)
    shift = jnp.asarray((3, -2), jnp.int32)
    _, moved = rotated_logits(params, q, k, pos + shift, pos + shift)
    if relative:
        assert commute < 1e-5  # float32 round-off of the generators
        np.testing.assert_allclose(moved, base, rtol=1e-3, atol=1e-3)
    else:
        assert commute > 1e-2
        assert np.abs(np.asarray(moved - base)).max() > 1e-1
    for step in ((1, 0), (0, 1)):  # each axis moves the logits
        _, other = rotated_logits(params, q, k, pos, pos + jnp.asarray(step, jnp.int32))
        assert np.abs(np.asarray(other - base)).max() > 1e-3, step
    # rotations: norms are kept
    np.testing.assert_allclose(jnp.linalg.norm(qr, axis=-1), jnp.linalg.norm(q, axis=-1),
                               rtol=1e-5)


def test_init_errors_and_listing():
    ld = positions.make("comrope", variant="ld").bind(DIMS).init_layer(jax.random.key(0))
    assert ld["freqs"].shape == (H, 2, 4, 4) and ld["axis_scales"].shape == (2, 2)
    np.testing.assert_allclose(np.std(np.asarray(ld["freqs"])), 0.125, rtol=0.4)
    li = positions.make("liere").bind(DIMS).init_layer(jax.random.key(0))
    assert li["freqs"].shape == (H, 2, 2, 4, 4) and set(li) == {"freqs"}
    for name, field, value in (("liere", "block_size", 1), ("liere", "block_size", 2.0),
                               ("liere", "init_std", 0), ("comrope", "variant", "xy")):
        with pytest.raises(ConfigError, match=f"position.{field}") as err:
            positions.make(name, **{field: value})
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="position.block_size"):
        positions.make("liere", block_size=3).bind(DIMS)
    with pytest.raises(ConfigError, match="position.block_size.*even number of blocks"):
        positions.make("comrope", block_size=8).bind(DIMS)
    with pytest.raises(ConfigError, match="model.causal"):
        positions.make("comrope").bind(dataclasses.replace(DIMS, causal=True))
    text = listing("schemes")
    assert "liere  (hooks: rotate; 2-D positions)" in text
    assert "comrope  (hooks: rotate; 2-D positions)" in text
    assert "variant='ap', block_size=4, init_std=0.125" in text or \
        "block_size=4, init_std=0.125, variant='ap'" in text
    assert math.isclose(positions.make("liere").init_std, 1 / 8)
