"""The `map_logits` hook (a map of a tile's scaled logits, all heads of each pair at once; DAPE)
and its plumbing: every registered scheme without the hook traces to exactly the program the
logits had before the hook existed; a test-local map that mixes heads gives the same values
and gradients on the reference, chunked, rows and lean paths, with padding, packed segments
and causal masks; every mask comes after the map (padding keys change nothing, a map that
pushes logits up keeps masked keys masked); an identity map changes no number; the kernel
falls back to chunked for it."""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import kernels, positions
from posjax.attention import attend, choose_implementation
from posjax.errors import ConfigError
from posjax.positions.base import Dims, Scheme
from posjax.tiling import mixed
from posjax.tiling.tiles import factored_raw, prepare, rotate, tile_logits

B, L, H, D = 2, 13, 3, 8
DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64, vocab_size=32)
PATHS = ("reference", "chunked", "rows", "lean")
TOL = dict(rtol=1e-4, atol=1e-5)  # as tests/attention/test_attend.py


def logits_before_map_logits(scheme, params, q, k, q_pos, k_pos, q_tok=None, k_tok=None):
    """posjax.tiling.tiles.tile_logits as it was before the map_logits hook (k_major=None)."""
    if scheme.scores is not None:
        raw = scheme.scores(params, q, k, q_pos, k_pos).astype(jnp.float32)
    elif scheme.content_factors is not None:  # a later hook, before the map as well
        raw = factored_raw(scheme, params, q, k, q_pos, k_pos)
    else:
        raw = mixed.einsum("bqhd,bkhd->bhqk", q, k)
    if scheme.content_logits is not None:
        raw = raw + scheme.content_logits(params, q, k, q_pos, k_pos).astype(jnp.float32)
    logits = raw * jnp.float32(scheme.logit_scale(q.shape[-1]))
    if scheme.bias is not None:
        logits = logits + scheme.bias(params, q_pos, k_pos).astype(jnp.float32)
    if scheme.token_bias is not None:
        logits = logits + scheme.token_bias(params, q_tok, k_tok, q_pos, k_pos).astype(
            jnp.float32)
    return logits


def _bound(name):
    scheme = positions.make(name)
    try:
        return scheme.bind(DIMS)
    except ConfigError:  # causal-only schemes (xPos)
        return scheme.bind(dataclasses.replace(DIMS, causal=True))


def _positions(scheme, length):
    idx = jnp.arange(length, dtype=jnp.int32)
    if scheme.position_dims == 1:
        return jnp.broadcast_to(idx, (B, length))
    coords = [0 * idx] * (scheme.position_dims - 2) + [idx // 4, idx % 4]
    return jnp.broadcast_to(jnp.stack(coords, -1), (B, length, scheme.position_dims))


@pytest.mark.parametrize("name", [n for n in positions.names()
                                  if positions.scheme_class(n).map_logits is None])
def test_every_scheme_without_the_hook_traces_to_the_program_it_had_before(name):
    scheme = _bound(name)
    params = scheme.init_layer(jax.random.key(0))
    rng = np.random.RandomState(0)
    q, k, v = (jnp.asarray(rng.randn(B, 6, H, D), jnp.float32) for _ in range(3))
    pos = _positions(scheme, 6)

    def tile(fn):
        def run(params, q, k, v):
            q_tok, k_tok = prepare(scheme, params, q, k, v, pos, pos)
            qr, kr = rotate(scheme, params, q, k, pos, pos)
            return fn(scheme, params, qr, kr, pos, pos, q_tok, k_tok)
        return str(jax.make_jaxpr(run)(params, q, k, v))

    assert tile(tile_logits) == tile(logits_before_map_logits)


def test_only_the_schemes_that_say_so_fill_the_hook():
    filled = {n for n in positions.names() if positions.scheme_class(n).map_logits is not None}
    assert "dape" in filled
    for n in filled:
        assert "map_logits" in positions.scheme_class(n).hook_names()


# -- a test-local map: mixes heads, reads positions, learns ------------------------------------


@dataclasses.dataclass(frozen=True)
class HeadMix(Scheme):
    """bias + map_logits: new_h = x_h + tanh(sum_g M_hg x_g + u_h (i - j) / 8) * 3 + 100
    (every head of the pair, and its positions; +100 pushes masked logits up too)."""

    name: ClassVar[str] = "test_head_mix"

    def init_layer(self, rng):
        r1, r2, r3 = jax.random.split(rng, 3)
        return {"slope": 0.3 * jax.random.normal(r1, (H,)),
                "mix": jax.random.normal(r2, (H, H)), "u": jax.random.normal(r3, (H,))}

    def bias(self, params, q_pos, k_pos):
        dist = jnp.abs(k_pos[:, None, :] - q_pos[:, :, None]).astype(jnp.float32)
        return -params["slope"][None, :, None, None] * dist[:, None]

    def map_logits(self, params, logits, q_pos, k_pos):
        rel = (q_pos[:, :, None] - k_pos[:, None, :]).astype(jnp.float32)[:, None] / 8.0
        mixed_heads = jnp.einsum("hg,bgqk->bhqk", params["mix"], logits)
        return logits + 3.0 * jnp.tanh(mixed_heads + params["u"][None, :, None, None] * rel) + 100


@dataclasses.dataclass(frozen=True)
class IdentityMap(HeadMix):
    name: ClassVar[str] = "test_identity_map"

    def map_logits(self, params, logits, q_pos, k_pos):
        return logits


@dataclasses.dataclass(frozen=True)
class NoMap(HeadMix):
    name: ClassVar[str] = "test_no_map"
    map_logits: ClassVar = None


def _cases():
    """name -> (causal, attend kwargs, allowed [B, L, L] of real queries)."""
    ar = np.arange(L)
    real = ar[None] < np.array([L, 8])[:, None]  # row 1: 5 padding tokens
    seg = np.array([[1] * 7 + [2] * 6, [1] * 3 + [2] * 5 + [0] * 5])
    pos = np.stack([np.r_[np.arange(7), np.arange(6)], np.r_[np.arange(3), np.arange(10)]])
    return {
        "causal_padded": (True, dict(kv_mask=jnp.asarray(real))),
        "packed_segments": (False, dict(segment_ids=(jnp.asarray(seg, jnp.int32),) * 2,
                                        q_pos=jnp.asarray(pos, jnp.int32),
                                        k_pos=jnp.asarray(pos, jnp.int32))),
    }


def _inputs(seed=0):
    rng = np.random.RandomState(seed)
    return tuple(jnp.asarray(rng.randn(B, L, H, D), jnp.float32) for _ in range(4))


@functools.lru_cache(maxsize=None)
def _out_and_grads(scheme, impl, case, junk=0.0):
    causal, kw = _cases()[case]
    q, k, v, ct = _inputs()
    pad = jnp.asarray(np.arange(L)[None] >= np.array([L, 8])[:, None])[:, :, None, None]
    k, v = k + junk * pad, v - junk * pad
    params = scheme.init_layer(jax.random.key(1))

    def f(q, k, v, params):
        return attend(q, k, v, scheme=scheme, params=params, causal=causal,
                      implementation=impl, block_q=4, block_k=4, **kw)

    return jax.jit(lambda: (f(q, k, v, params), jax.grad(
        lambda *a: (f(*a) * ct).sum(), (0, 1, 2, 3))(q, k, v, params)))()


@pytest.mark.parametrize("case", ["causal_padded", "packed_segments"])
def test_a_head_mixing_map_is_the_same_on_every_path(case):
    scheme = HeadMix().bind(DIMS)
    want, want_grads = _out_and_grads(scheme, "reference", case)
    assert np.all(np.isfinite(np.asarray(want)))
    for impl in PATHS[1:]:
        got, grads = _out_and_grads(scheme, impl, case)
        np.testing.assert_allclose(got, want, err_msg=impl, **TOL)
        for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
            np.testing.assert_allclose(a, b, err_msg=impl, **TOL)
    # the map is really applied: without it the numbers differ
    plain, _ = _out_and_grads(NoMap().bind(DIMS), "reference", case)
    assert not np.allclose(plain, want)


@pytest.mark.parametrize("impl", PATHS)
def test_masks_come_after_the_map(impl):
    """Junk (1e3) in the padding keys changes no real query's output or gradient, and the
    padding keys get no gradient, although the map adds 100 to every logit, masked or not."""
    scheme = HeadMix().bind(DIMS)
    out, grads = _out_and_grads(scheme, impl, "causal_padded")
    out2, grads2 = _out_and_grads(scheme, impl, "causal_padded", junk=1e3)
    real = np.arange(L)[None] < np.array([L, 8])[:, None]
    np.testing.assert_allclose(np.asarray(out2)[real], np.asarray(out)[real], **TOL)
    for a, b in zip(grads[:3], grads2[:3]):
        np.testing.assert_allclose(np.asarray(b)[real], np.asarray(a)[real], **TOL)
    for g in grads[1:3]:  # dk, dv of padding keys
        np.testing.assert_array_equal(np.asarray(g)[~real], 0.0)


@pytest.mark.parametrize("impl", PATHS)
def test_an_identity_map_changes_no_number(impl):
    for case in _cases():
        got = _out_and_grads(IdentityMap().bind(DIMS), impl, case)
        want = _out_and_grads(NoMap().bind(DIMS), impl, case)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_array_equal(a, b, err_msg=f"{impl} {case}")


def test_the_kernel_falls_back_to_chunked_for_the_hook():
    scheme = HeadMix().bind(DIMS)
    assert "map_logits" in scheme.hooks and kernels.refusal(scheme) is None
    assert not kernels.supports(scheme)
    assert choose_implementation("kernel", scheme, 64) == "chunked"
