"""The compiled CPU kernel with q and k wider than v (a factored term, `content_factors`:
[q' | q_extra] . [k | k_extra]): its forward and backward equal softmax attention written out
in float64 here, values and gradients of q, k and v, with key dims a multiple of 8 below, at
and above the compiled widths, odd lengths, several key blocks per row, padding, packed
segments and a local window, q and k concatenated or the factors in arrays of their own
(k_extra per head or shared by the heads); `attend` runs Transformer-XL there (rows and auto) with the
reference's numbers, gradients of its u, v, W_r included, padded and at randomized positions.

Compile budget: the kernel compiles once per session (C++, cached on disk); each case jits
one small function (B=2, H=2, L <= 150).
"""

from __future__ import annotations

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import positions
from posjax.attention import attend, native
from posjax.positions.base import Dims

B, H = 2, 2
TOL = dict(rtol=2e-5, atol=2e-5)

pytestmark = pytest.mark.skipif(not (os.environ.get("CXX") or shutil.which("c++")),
                                reason="no C++ compiler here")


def _dense64(q, k, v, scale, q_pos=None, k_pos=None, window=None, kv_mask=None,
             segments=None):
    """softmax(scale q.k) v over the pairs that may attend, in float64 numpy, and its
    gradients (dq, dk, dv) for the cotangent `ct` via the softmax Jacobian."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    ok = np.ones((q.shape[0], q.shape[1], k.shape[1]), bool)
    if window is not None:
        ok &= np.abs(np.asarray(q_pos)[:, :, None] - np.asarray(k_pos)[:, None, :]) <= window // 2
    if kv_mask is not None:
        ok &= np.asarray(kv_mask)[:, None, :]
    if segments is not None:
        ok &= np.asarray(segments[0])[:, :, None] == np.asarray(segments[1])[:, None, :]
    ok = ok[:, None]
    logits = np.where(ok, logits, -np.inf)
    mx = np.max(logits, -1, keepdims=True)
    e = np.where(ok, np.exp(logits - np.where(np.isfinite(mx), mx, 0.0)), 0.0)
    total = e.sum(-1, keepdims=True)
    p = np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
    out = np.einsum("bhqk,bkhd->bqhd", p, v)

    def grads(ct):
        ct = np.asarray(ct, np.float64)
        dv = np.einsum("bhqk,bqhd->bkhd", p, ct)
        dp = np.einsum("bqhd,bkhd->bhqk", ct, v)
        ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
        return (np.einsum("bhqk,bkhd->bqhd", ds, k), np.einsum("bhqk,bqhd->bkhd", ds, q), dv)

    return out, grads


def _inputs(len_q, len_k, key_dim, dim, seed=0):
    rng = np.random.default_rng(seed)
    shapes = ((B, len_q, H, key_dim), (B, len_k, H, key_dim), (B, len_k, H, dim),
              (B, len_q, H, dim))
    return [jnp.asarray(rng.standard_normal(s), jnp.float32) for s in shapes]


def _check(q, k, v, ct, scale, **masks):
    assert native._registered()
    fn = lambda a, b, c: native.attention(a, b, c, scale, **masks)  # noqa: E731
    out = jax.jit(fn)(q, k, v)
    grads = jax.jit(jax.grad(lambda *a: jnp.sum(fn(*a) * ct), argnums=(0, 1, 2)))(q, k, v)
    names = dict(q_pos="q_pos", k_pos="k_pos", window="window", kv_mask="kv_mask",
                 segment_ids="segments")
    want, want_grads = _dense64(q, k, v, scale, **{names[n]: x for n, x in masks.items()})
    assert out.shape == v.shape[:1] + q.shape[1:3] + v.shape[3:]
    np.testing.assert_allclose(out, want, err_msg="output", **TOL)
    for name, g, w in zip(("dq", "dk", "dv"), grads, want_grads(ct)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, err_msg=name, **TOL)


@pytest.mark.parametrize("key_dim, dim", [(72, 8), (24, 16), (8, 16), (136, 32), (120, 8)])
def test_wider_keys_equal_the_definition(key_dim, dim, monkeypatch):
    # 37 queries over 150 keys in key blocks of 64 (the online softmax rescales across them);
    # key dims that take every column chunk of dQ and dK (64, 32, 16, 8) and one below v's
    monkeypatch.setattr(native, "BLOCK_Q", 32)
    monkeypatch.setattr(native, "BLOCK_K", 64)
    q, k, v, ct = _inputs(37, 150, key_dim, dim, seed=key_dim)
    _check(q * 2.0, k, v, ct, key_dim ** -0.5)


def test_padding_packed_segments_and_a_window(monkeypatch):
    # Row 0: two packed examples then padding (a segment no key has for query 3); row 1 whole.
    monkeypatch.setattr(native, "BLOCK_Q", 32)
    monkeypatch.setattr(native, "BLOCK_K", 64)
    length = 101
    q, k, v, ct = _inputs(length, length, 72, 8, seed=1)
    seg = np.ones((B, length), np.int32)
    seg[0, 40:77] = 2
    kv_mask = np.ones((B, length), bool)
    kv_mask[0, 77:] = False
    q_seg = seg.copy()
    q_seg[0, 3] = 7
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (B, length))
    masks = dict(kv_mask=jnp.asarray(kv_mask), segment_ids=(jnp.asarray(q_seg), jnp.asarray(seg)))
    _check(q, k, v, ct, 0.125, **masks)
    _check(q, k, v, ct, 0.125, q_pos=pos, k_pos=pos, window=30, **masks)
    _check(q, k, v, ct, 0.125, kv_mask=jnp.asarray(kv_mask))  # the padded rectangles alone


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("masks", ["none", "padding, segments, window"])
def test_factors_in_arrays_of_their_own_equal_the_concatenation(shared, masks, monkeypatch):
    # native.attention(q, k, v, q_extra=, k_extra=) reads the factors where they are (rows'
    # call): the numbers of [q | q_extra] . [k | k_extra], k_extra per head or shared by the
    # heads (its gradient then summed over them).
    monkeypatch.setattr(native, "BLOCK_Q", 32)
    monkeypatch.setattr(native, "BLOCK_K", 64)
    length, dim, extra = 77, 8, 64
    q, k, v, ct = _inputs(length, length, dim + extra, dim, seed=6)
    if shared:
        k = k.at[..., dim:].set(jnp.broadcast_to(k[:, :, :1, dim:], k[..., dim:].shape))
    kw = {}
    if masks != "none":
        pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (B, length))
        seg = jnp.asarray((np.arange(length)[None] >= np.array([[30], [length]])).astype(np.int32))
        kw = dict(q_pos=pos, k_pos=pos, window=40, segment_ids=(seg, seg),
                  kv_mask=jnp.asarray(np.arange(length)[None] < np.array([[70], [length]])))
    assert native._registered()
    k_extra = k[:, :, :1, dim:] if shared else k[..., dim:]

    def split(q_main, k_main, v, q_extra, k_extra):
        return native.attention(q_main, k_main, v, 0.2, q_extra=q_extra, k_extra=k_extra, **kw)

    args = (q[..., :dim], k[..., :dim], v, q[..., dim:], k_extra)
    out = jax.jit(split)(*args)
    grads = jax.jit(jax.grad(lambda *a: jnp.sum(split(*a) * ct), argnums=(0, 1, 2, 3, 4)))(*args)
    names = dict(q_pos="q_pos", k_pos="k_pos", window="window", kv_mask="kv_mask",
                 segment_ids="segments")
    want, want_grads = _dense64(q, k, v, 0.2, **{names[n]: x for n, x in kw.items()})
    dq, dk, dv = want_grads(ct)
    dk_extra = dk[..., dim:].sum(2, keepdims=True) if shared else dk[..., dim:]
    np.testing.assert_allclose(out, want, err_msg="output", **TOL)
    for name, g, w in zip(("dq", "dk", "dv", "dq_extra", "dk_extra"), grads,
                          (dq[..., :dim], dk[..., :dim], dv, dq[..., dim:], dk_extra)):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, err_msg=name, **TOL)
    # k_extra not differentiated (XL's key side is a function of the positions): the kernel's
    # backward is asked for no dk_extra ([B, L, H, 0]) and the other gradients are unchanged
    no_dk_extra = jax.jit(jax.grad(lambda *a: jnp.sum(split(*a) * ct), argnums=(0, 1, 2, 3)))
    assert f"tensor<{B}x{length}x{H}x0xf32>" in no_dk_extra.lower(*args).as_text()
    for name, g, w in zip(("dq", "dk", "dv", "dq_extra"), no_dk_extra(*args), grads):
        np.testing.assert_allclose(g, w, err_msg=name, rtol=1e-6, atol=1e-6)


def test_key_dims_it_does_not_take_are_refused_and_rows_keeps_its_step():
    assert native.key_dim_supported(72, 8) and native.key_dim_supported(8, 8)
    assert native.key_dim_supported(native.MAX_KEY_DIM, 64)
    for key_dim, dim in ((76, 8), (native.MAX_KEY_DIM + 8, 8), (72, 24), (0, 8)):
        assert not native.key_dim_supported(key_dim, dim)
    xl = positions.make({"name": "xl", "rel_dim": 6}).bind(_dims(8))  # key dim 8 + 6 = 14
    q = jnp.zeros((B, 5, H, 8), jnp.float32)
    pos = jnp.zeros((B, 5), jnp.int32)
    assert native.key_dim(xl, xl.init_layer(jax.random.key(0)), q, q, pos, pos) == 14
    assert not native.usable(xl, q, causal=False, logn_length=None, sinks=None, key_dim=14)
    assert not native.usable(xl, q, causal=False, logn_length=None, sinks=None)
    assert native.usable(xl, q, causal=False, logn_length=None, sinks=None, key_dim=16)
    fn = lambda a: attend(a, a, a, scheme=xl, params=xl.init_layer(jax.random.key(0)),  # noqa: E731
                          implementation="rows")
    assert native.TARGET not in jax.jit(fn).lower(q).as_text()


def _dims(dim):
    return Dims(num_heads=H, head_dim=dim, hidden=64, max_length=1024, vocab_size=32)


@pytest.mark.parametrize("case", ["padded, randomized positions", "window, packed"])
def test_attend_runs_xl_in_the_kernel_with_the_references_numbers(case):
    # XL at the algorithmic grid's shape of head (8) and rel_dim (the width, 64): key dim 72.
    # Randomized positions: sorted draws from 0..999, gaps everywhere (Ruoss et al.).
    scheme = positions.make("xl").bind(_dims(8))
    params = jax.tree.map(lambda x: x * 10, scheme.init_layer(jax.random.key(0)))
    length = 45
    q, k, v, ct = _inputs(length, length, 8, 8, seed=2)
    rng = np.random.default_rng(3)
    kw = {}
    if case == "padded, randomized positions":
        pos = np.sort(np.stack([rng.choice(1000, length, replace=False) for _ in range(B)]), 1)
        kw["kv_mask"] = jnp.asarray(np.arange(length)[None] < np.array([[length], [29]]))
    else:
        pos = np.tile(np.arange(length), (B, 1))
        seg = (np.arange(length)[None] >= np.array([[20], [length]])).astype(np.int32)
        kw.update(window=16, segment_ids=(jnp.asarray(seg), jnp.asarray(seg)))
    pos = jnp.asarray(pos, jnp.int32)

    def run(implementation):
        def fn(q, k, v, params):
            return attend(q, k, v, scheme=scheme, params=params, q_pos=pos, k_pos=pos,
                          implementation=implementation, **kw)
        return fn

    def out_and_grads(fn):
        loss = lambda *a: jnp.sum(fn(*a) * ct)  # noqa: E731
        return jax.jit(fn)(q, k, v, params), jax.jit(jax.grad(loss, (0, 1, 2, 3)))(
            q, k, v, params)

    for implementation in ("rows", "auto"):
        assert native.TARGET in jax.jit(run(implementation)).lower(q, k, v, params).as_text()
    assert native.TARGET not in jax.jit(run("reference")).lower(q, k, v, params).as_text()
    (out, grads), (ref, ref_grads) = out_and_grads(run("rows")), out_and_grads(run("reference"))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    leaves, ref_leaves = jax.tree.leaves(grads), jax.tree.leaves(ref_grads)
    assert len(leaves) == 6  # q, k, v, and the params u, v, w_r
    for g, rg in zip(leaves, ref_leaves):
        # relative to each gradient's size: W_r's entries sum over every pair
        np.testing.assert_allclose(g, rg, rtol=1e-4, atol=1e-5 * float(np.abs(rg).max()))
