"""posjax.attention: reference == chunked (values and gradients) for every hook type and every
registered scheme; masks, log-n, fully masked rows; the reference against a plain numpy loop;
chunked never builds an [Lq, Lk] array; bad inputs raise ConfigError before tracing.

Compile budget: every comparison jits ONE function per implementation that returns the output
and the gradients together; shapes are tiny (B=2, H=2, D=8) and blocks small (16).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import subprocess
import sys
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import positions
from posjax.attention import AUTO_CHUNKED_MIN_KEYS, attend, choose_implementation
from posjax.errors import ConfigError
from posjax.positions.base import Dims, Scheme

B, H, D = 2, 2, 8
F32_TOL = dict(rtol=1e-4, atol=1e-5)
# bf16 inputs: q.k and p@v run in bf16 (float32 accumulation), and chunked rounds UNnormalized
# tile probabilities to bf16 where the reference rounds normalized ones: ~3 significant digits.
BF16_TOL = dict(rtol=3e-2, atol=3e-2)


# -- test-local schemes that between them fill every attention hook, so attention is tested
#    independently of the scheme modules (tested in tests/positions/) ---------------------


@dataclasses.dataclass(frozen=True)
class AllHooks(Scheme):
    """rotate + bias + content_logits + content_values, each with learnable parameters."""

    name: ClassVar[str] = "test_all_hooks"
    window: int = 3

    def init_layer(self, rng):
        dims = self.bound_dims
        r1, r2, r3 = jax.random.split(rng, 3)
        return {
            "freq": jax.random.uniform(r1, (dims.head_dim // 2,), minval=0.1, maxval=1.0),
            "slope": 0.3 * jax.random.normal(r2, (dims.num_heads,)),
            "table": 0.3 * jax.random.normal(r3, (2 * self.window + 1, dims.head_dim)),
        }

    def rotate(self, params, q, k, q_pos, k_pos):
        def rot(x, pos):
            angle = pos[:, :, None, None].astype(jnp.float32) * params["freq"]  # [B, L, 1, D/2]
            x1, x2 = x[..., ::2].astype(jnp.float32), x[..., 1::2].astype(jnp.float32)
            cos, sin = jnp.cos(angle), jnp.sin(angle)
            out = jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)
            return out.reshape(x.shape).astype(x.dtype)

        return rot(q, q_pos), rot(k, k_pos)

    def _rel(self, params, q_pos, k_pos):  # [B, Lq, Lk, D], NEZHA-style clipped table rows
        rel = jnp.clip(k_pos[:, None, :] - q_pos[:, :, None], -self.window, self.window)
        return params["table"][rel + self.window]

    def bias(self, params, q_pos, k_pos):
        dist = jnp.abs(k_pos[:, None, :] - q_pos[:, :, None]).astype(jnp.float32)
        return -params["slope"][None, :, None, None] * dist[:, None]

    def content_logits(self, params, q, k, q_pos, k_pos):
        r = self._rel(params, q_pos, k_pos).astype(q.dtype)
        return jnp.einsum("bqhd,bqkd->bhqk", q, r, preferred_element_type=jnp.float32)

    def content_values(self, params, probs, q_pos, k_pos):
        return jnp.einsum("bhqk,bqkd->bqhd", probs, self._rel(params, q_pos, k_pos))


@dataclasses.dataclass(frozen=True)
class ScoresHook(Scheme):
    """scores replaces q.k (q, k arrive unrotated); logit_scale overridden."""

    name: ClassVar[str] = "test_scores"

    def init_layer(self, rng):
        return {"w": 0.5 * jax.random.normal(rng, (self.bound_dims.num_heads,))}

    def scores(self, params, q, k, q_pos, k_pos):
        dot = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
        rel = jnp.tanh(0.2 * (k_pos[:, None, :] - q_pos[:, :, None]).astype(jnp.float32))
        return dot * (1.0 + params["w"][None, :, None, None] * rel[:, None])

    def logit_scale(self, head_dim):
        return 0.7 / math.sqrt(head_dim)


DIMS = Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=64, vocab_size=32)
LOCAL = {"all_hooks": AllHooks().bind(DIMS), "scores": ScoresHook().bind(DIMS), "none": None}


def _params(scheme):
    """Layer params of a bound scheme."""
    return {} if scheme is None else scheme.init_layer(jax.random.PRNGKey(1))


# -- inputs and the compared function ------------------------------------------------------


def _qkv(len_q, len_k, dtype=jnp.float32, seed=0):
    rng = np.random.RandomState(seed)
    q, k, v = (rng.randn(B, n, H, D) for n in (len_q, len_k, len_k))
    ct = rng.randn(B, len_q, H, D)  # cotangent: the loss is sum(out * ct)
    return tuple(jnp.asarray(x, dtype) for x in (q, k, v)) + (jnp.asarray(ct, jnp.float32),)


def _lengths_mask(len_k, lengths):
    return jnp.asarray(np.arange(len_k)[None, :] < np.asarray(lengths)[:, None])


def _out_and_grads(implementation, scheme, params, q, k, v, ct, **kw):
    """Output and d(sum(out * ct))/d(q, k, v, params) from one jitted function."""

    kw = {"block_q": 16, "block_k": 16, **kw}

    def loss(q, k, v, params):
        out = attend(q, k, v, scheme=scheme, params=params, implementation=implementation, **kw)
        return (out.astype(jnp.float32) * ct).sum(), out

    fn = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True))
    grads, out = fn(q, k, v, params)
    return out, grads


def _assert_same(scheme, params, q, k, v, ct, tol=F32_TOL, implementation="chunked", **kw):
    """`implementation` == reference for the output and every gradient; returns the
    reference output and gradients."""
    ref_out, ref_grads = _out_and_grads("reference", scheme, params, q, k, v, ct, **kw)
    out, grads = _out_and_grads(implementation, scheme, params, q, k, v, ct, **kw)
    assert out.dtype == q.dtype and out.shape == q.shape[:1] + ref_out.shape[1:]
    f32 = lambda x: np.asarray(jnp.asarray(x, jnp.float32))  # noqa: E731
    np.testing.assert_allclose(f32(out), f32(ref_out), err_msg="output", **tol)
    for name, g, rg in zip(("dq", "dk", "dv", "dparams"), grads, ref_grads):
        flat, ref_flat = jax.tree.leaves(g), jax.tree.leaves(rg)
        assert len(flat) == len(ref_flat)
        for a, b in zip(flat, ref_flat):
            assert np.all(np.isfinite(f32(a))), name
            np.testing.assert_allclose(f32(a), f32(b), err_msg=name, **tol)
    return ref_out, ref_grads


# -- reference == chunked, per feature ------------------------------------------------------


@pytest.mark.parametrize("scheme_name", ["all_hooks", "scores"])
def test_single_partial_block_bidirectional(scheme_name):
    # L=5 < block 16: one block, clamped to the length.
    scheme = LOCAL[scheme_name]
    _assert_same(scheme, _params(scheme), *_qkv(5, 5))


@pytest.mark.parametrize("scheme_name", ["all_hooks", "scores"])
def test_causal_with_key_padding(scheme_name):
    # L=37 with block 16: 3 blocks, the last one padded internally.
    scheme = LOCAL[scheme_name]
    kv_mask = _lengths_mask(37, [37, 23])
    _assert_same(scheme, _params(scheme), *_qkv(37, 37), causal=True, kv_mask=kv_mask)


def test_segments_and_logn_with_a_fully_masked_row():
    # Two packed examples + padding (segment 0); query 36 has segment 9, which no key has.
    scheme = LOCAL["all_hooks"]
    seg = np.array([1] * 20 + [2] * 12 + [0] * 5)
    q_seg = seg.copy()
    q_seg[36] = 9
    segment_ids = (jnp.asarray(np.stack([q_seg, seg]), jnp.int32),
                   jnp.asarray(np.stack([seg, seg]), jnp.int32))
    out, grads = _assert_same(scheme, _params(scheme), *_qkv(37, 37), segment_ids=segment_ids,
                              logn_length=16)
    np.testing.assert_array_equal(np.asarray(out[0, 36]), 0.0)
    np.testing.assert_array_equal(np.asarray(grads[0][0, 36]), 0.0)  # dq of that row
    assert np.abs(np.asarray(out[1, 36])).sum() > 0


def test_cross_lengths_offset_positions_and_empty_rows():
    # Lq != Lk, different blocks per axis, causal BY POSITIONS (queries are the last 21 of 37
    # positions), log-n, no scheme. Batch row 1 hides keys 0..20: its queries at positions
    # 16..20 have no key to attend and must output zeros with finite gradients.
    q_pos = jnp.broadcast_to(jnp.arange(16, 37, dtype=jnp.int32), (B, 21))
    kv_mask = jnp.asarray(np.stack([np.ones(37, bool), np.arange(37) > 20]))
    out, _ = _assert_same(None, {}, *_qkv(21, 37), q_pos=q_pos, kv_mask=kv_mask, causal=True,
                          logn_length=8, block_q=8, block_k=16)
    np.testing.assert_array_equal(np.asarray(out[1, :5]), 0.0)
    assert np.all(np.abs(np.asarray(out[1, 5:])).sum(-1) > 0)


def test_bfloat16_matches_reference_and_float32():
    scheme = LOCAL["all_hooks"]
    params = _params(scheme)
    q, k, v, ct = _qkv(37, 37, jnp.bfloat16)
    kv_mask = _lengths_mask(37, [37, 30])
    out, _ = _assert_same(scheme, params, q, k, v, ct, tol=BF16_TOL, causal=True,
                          kv_mask=kv_mask)
    out32 = jax.jit(functools.partial(attend, scheme=scheme, causal=True, kv_mask=kv_mask,
                                      implementation="reference"))(
        *(x.astype(jnp.float32) for x in (q, k, v)), params=params)
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(out32), **BF16_TOL)


# -- every registered scheme ---------------------------------------------------------------


# Options that make L=37 reach each scheme's interesting regime (clipping, far branches, log
# buckets, a logit scale != 1/sqrt(D)) and keep compiles small (FIRE unrolls its MLP width).
TINY_OPTIONS = {
    "rope": dict(scaling="yarn", factor=2.0, original_length=16),
    "rerope": dict(window=8),
    "leaky_rerope": dict(window=8),
    "nezha": dict(max_relative_position=8),
    "deberta": dict(bucket_size=8, max_position=32),
    "fire": dict(mlp_width=4, init_L=16.0),
    "tupe": dict(relative=True),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", positions.names())
def test_registered_scheme_reference_equals_chunked(name):
    scheme = positions.make(name, **TINY_OPTIONS.get(name, {}))
    try:
        scheme = scheme.bind(DIMS)
    except ConfigError:  # causal-only schemes (xPos) reject bidirectional use
        scheme = scheme.bind(dataclasses.replace(DIMS, causal=True))
    if set(scheme.hooks) <= {"embed"} and scheme.logit_scale(D) == 1 / math.sqrt(D):
        # Nothing of this scheme reaches attention (it acts on embeddings only): attention must
        # be the plain one, which is compared once and shared by all such schemes.
        _registry_case(None, scheme.dims.causal)
    else:
        _registry_case(scheme, scheme.dims.causal)


@functools.lru_cache(maxsize=None)
def _registry_case(scheme, causal):
    kv_mask = _lengths_mask(37, [37, 29])
    kw = {}
    if scheme is not None and scheme.position_dims > 1:  # (row, column) on a 7-wide grid,
        idx = jnp.arange(37)  # for 3-D schemes after a frame t = 0
        coords = [0 * idx] * (scheme.position_dims - 2) + [idx // 7, idx % 7]
        grid = jnp.stack(coords, -1).astype(jnp.int32)
        kw = dict(q_pos=jnp.broadcast_to(grid, (B,) + grid.shape),
                  k_pos=jnp.broadcast_to(grid, (B,) + grid.shape))
    _assert_same(scheme, _params(scheme), *_qkv(37, 37, seed=3), kv_mask=kv_mask,
                 causal=causal, **kw)


# -- the reference is the definition: check it against a plain loop -------------------------


def test_reference_matches_numpy_loop():
    q, k, v, _ = _qkv(6, 9, seed=5)
    q_pos = jnp.asarray([[3, 4, 5, 6, 7, 8], [0, 2, 4, 6, 8, 10]], jnp.int32)
    k_pos = jnp.broadcast_to(jnp.arange(9, dtype=jnp.int32), (B, 9))
    kv_mask = _lengths_mask(9, [9, 7])
    out = jax.jit(functools.partial(attend, causal=True, logn_length=4,
                                    implementation="reference"))(
        q, k, v, q_pos=q_pos, k_pos=k_pos, kv_mask=kv_mask)
    qn, kn, vn, qp, kp, km = map(np.asarray, (q, k, v, q_pos, k_pos, kv_mask))
    want = np.zeros(qn.shape)
    for b in range(B):
        for i in range(qn.shape[1]):
            keys = [j for j in range(kn.shape[1]) if km[b, j] and kp[b, j] <= qp[b, i]]
            for h in range(H):
                s = np.array([qn[b, i, h] @ kn[b, j, h] for j in keys]) / math.sqrt(D)
                s = s * math.log(len(keys)) / math.log(4)
                p = np.exp(s - s.max())
                want[b, i, h] = (p / p.sum()) @ vn[b, keys, h]
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-6)


# -- chunked keeps memory O(L x block) ------------------------------------------------------


def _all_avals(jaxpr):
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            yield var.aval
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                sub = getattr(sub, "jaxpr", sub)  # ClosedJaxpr -> Jaxpr
                if hasattr(sub, "eqns"):
                    yield from _all_avals(sub)


def test_chunked_never_builds_a_full_logits_array():
    # Forward AND backward of chunked at L=256, block 32: no intermediate may be as large as
    # the [B, H, L, L] logits (a tile is 64x smaller; O(L) arrays are 2x B*L*H*D).
    length = 256
    q, k, v, _ = _qkv(length, length)
    scheme = LOCAL["all_hooks"]

    def loss(q, k, v, params):
        out = attend(q, k, v, scheme=scheme, params=params, causal=True, logn_length=64,
                     implementation="chunked", block_q=32, block_k=32)
        return out.sum()

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2, 3)))(q, k, v, _params(scheme))
    largest = max(math.prod(a.shape) for a in _all_avals(jaxpr.jaxpr) if hasattr(a, "shape"))
    assert largest < B * H * length * length // 8, largest


@dataclasses.dataclass(frozen=True)
class TileCounter(Scheme):
    """A zero bias that reports every tile it is asked for (jax.debug.callback runs only when
    the tile's computation runs)."""

    name: ClassVar[str] = "test_tile_counter"

    def bias(self, params, q_pos, k_pos):
        jax.debug.callback(lambda: TILES.append(1), ordered=False)
        return jnp.zeros((q_pos.shape[0], 1, q_pos.shape[1], k_pos.shape[1]), jnp.float32)


TILES: list = []


@pytest.mark.parametrize("causal, padded_keys, live", [(True, 0, 10), (False, 16, 12)])
def test_chunked_skips_tiles_with_nothing_to_attend(causal, padded_keys, live):
    # 64 tokens in blocks of 16: 4 x 4 tiles. Causal: only the 10 on or below the diagonal
    # can attend anything; the last key block all padding: 12 tiles. Skipped tiles change no
    # number (same output as the reference).
    q, k, v, _ = _qkv(64, 64)
    mask = _lengths_mask(64, [64 - padded_keys] * B)
    TILES.clear()
    out = attend(q, k, v, scheme=TileCounter().bind(DIMS), params={}, kv_mask=mask, causal=causal,
                 implementation="chunked", block_q=16, block_k=16)
    jax.effects_barrier()
    assert len(TILES) == live
    ref = attend(q, k, v, kv_mask=mask, causal=causal, implementation="reference")
    np.testing.assert_allclose(out, ref, **F32_TOL)


# -- dispatch and validation ------------------------------------------------------------------


def test_auto_and_kernel_dispatch_on_cpu():
    scheme = LOCAL["all_hooks"]
    assert choose_implementation("auto", scheme, AUTO_CHUNKED_MIN_KEYS) == "reference"
    assert choose_implementation("lean", scheme, 16) == "lean"
    assert choose_implementation("lean", scheme, 16, logn_length=16) == "reference"
    long_path = "rows" if jax.default_backend() == "cpu" else "chunked"
    assert choose_implementation("auto", scheme, AUTO_CHUNKED_MIN_KEYS + 1) == long_path
    assert choose_implementation("kernel", scheme, 16) in ("kernel", "chunked")
    if jax.default_backend() == "cpu":
        assert choose_implementation("kernel", scheme, 16) == "chunked"
    assert choose_implementation("reference", scheme, 10**6) == "reference"


@pytest.mark.parametrize("name", ["stick_breaking", "path", "cope"])
def test_auto_runs_a_scheme_that_carries_state_in_chunked_tiles(name):
    # Their hooks carry a state outward from the query key block by key block: rows would
    # run them over whole key rows (1.6-4x slower at 8192 keys), the reference from 128 keys
    # on; chunked carries the state tile by tile (the evaluator's blocked path too).
    from posjax.attention import AUTO_CHUNKED_MIN_KEYS_CARRIED, blocked_path, carries

    scheme = positions.make(name)
    assert carries(scheme) and carries(type(scheme)) and not carries(positions.make("rope"))
    assert choose_implementation("auto", scheme, AUTO_CHUNKED_MIN_KEYS_CARRIED) == "reference"
    assert choose_implementation("auto", scheme, AUTO_CHUNKED_MIN_KEYS_CARRIED + 1) == "chunked"
    assert choose_implementation("auto", scheme, 10**5, causal=True) == "chunked"
    assert blocked_path(False, type(scheme)) == "chunked"
    assert blocked_path(False, type(positions.make("rope"))) == (
        "rows" if jax.default_backend() == "cpu" else "chunked")


# Only posjax.attention is imported: attend(implementation='kernel') runs the Pallas kernel
# (interpret mode on CPU) and gives the reference's numbers.
KERNEL_FROM_ATTENTION_ALONE = """
import sys
import jax, jax.numpy as jnp, numpy as np
from posjax import positions
assert "posjax.kernels" not in sys.modules
import posjax.attention as attention
q, k, v = (jax.random.normal(jax.random.key(i), (1, 16, 2, 8)) for i in range(3))
pos = jnp.broadcast_to(jnp.arange(16), (1, 16))
out = {impl: attention.attend(q, k, v, scheme=positions.make("alibi").bind(
           positions.Dims(num_heads=2, head_dim=8, hidden=16, max_length=16)), q_pos=pos, k_pos=pos,
           implementation=impl, block_q=16, block_k=16) for impl in ("kernel", "reference")}
np.testing.assert_allclose(out["kernel"], out["reference"], rtol=1e-4, atol=1e-5)
print("kernel ran;", "posjax.kernels" in sys.modules)
"""


@pytest.mark.slow  # a fresh interpreter: jax import and an interpret-mode kernel compile
def test_kernel_runs_after_importing_posjax_attention_alone():
    r = subprocess.run([sys.executable, "-c", KERNEL_FROM_ATTENTION_ALONE], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "kernel ran; True"


def test_auto_asks_the_kernel_on_an_accelerator(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert choose_implementation("auto", positions.make("t5"), 4096) == "kernel"
    assert choose_implementation("auto", positions.make("cope"), 4096) == "chunked"
    with pytest.raises(ConfigError, match="implementation='kernel'"):
        choose_implementation("kernel", positions.make("cope"), 16)


def _bad_inputs():
    q, k, v, _ = _qkv(5, 7)
    pos = jnp.zeros((B, 5), jnp.int32)
    return [
        ("implementation", dict(implementation="flash")),
        ("q.shape", dict(q=q[0])),
        ("k.shape", dict(k=k[:, :, :1])),
        ("v.shape", dict(v=v[:, :6])),
        ("q.dtype", dict(q=pos[..., None, None].repeat(D, -1).repeat(H, -2))),
        ("k.dtype/v.dtype", dict(k=k.astype(jnp.bfloat16))),
        ("q_pos.shape", dict(q_pos=pos[:, :4])),
        ("q_pos.dtype", dict(q_pos=pos.astype(jnp.float32))),
        ("k_pos.shape", dict(k_pos=pos)),
        ("kv_mask.shape", dict(kv_mask=jnp.ones((B, 5), bool))),
        ("kv_mask.dtype", dict(kv_mask=jnp.ones((B, 7), jnp.int32))),
        ("segment_ids", dict(segment_ids=jnp.zeros((B, 5), jnp.int32))),
        ("segment_ids[1].shape", dict(segment_ids=(pos, pos))),
        ("segment_ids[0].dtype", dict(segment_ids=(pos.astype(jnp.float32),
                                                   jnp.zeros((B, 7), jnp.int32)))),
        ("causal", dict(causal="yes")),
        ("logn_length", dict(logn_length=1)),
        ("logn_length", dict(logn_length=True)),
        ("block_q", dict(block_q=0)),
        ("block_k", dict(block_k=16.0)),
        ("scheme", dict(scheme="rope")),
        ("scheme", dict(scheme=positions.make("alibi"))),  # not bound to model dims
        ("scheme.dims", dict(scheme=positions.make("alibi").bind(
            dataclasses.replace(DIMS, num_heads=H + 1)))),
    ], (q, k, v)


BAD, QKV = _bad_inputs()


@pytest.mark.parametrize("field,change", BAD, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD)])
def test_bad_inputs_raise_config_error_before_tracing(field, change):
    args = dict(zip("qkv", QKV))
    kwargs = {key: val for key, val in change.items() if key not in "qkv"}
    args.update({key: val for key, val in change.items() if key in "qkv"})
    with pytest.raises(ConfigError) as info:
        attend(args["q"], args["k"], args["v"], **kwargs)
    assert info.value.field == field
