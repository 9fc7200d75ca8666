"""The compiled CPU attention kernel (posjax/attention/native.py, cpu_attention.cc): its
forward and backward equal softmax attention written out densely here, values and gradients,
for every head size it takes, query and key lengths that are not multiples of any block,
several key blocks per row (the online softmax's rescaling), a local layer's window by
positions in order, shuffled, and so narrow that whole tiles hold no pair, padding and packed
segments (a query with no key gets 0); `attend` runs it
(and only it) for plain attention, the same numbers as the reference; everywhere else rows
keeps its XLA step; no compiler or POSJAX_CPU_KERNEL=0 turns it off.

Compile budget: the kernel compiles once per session (C++, ~10 s, cached on disk); each case
jits one small custom-call function (B=2, H=2, L <= 200).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import positions
from posjax.attention import attend, native
from posjax.positions.base import Dims

B, H = 2, 2
TOL = dict(rtol=2e-5, atol=2e-5)

# Only a machine without a compiler skips: with one, a failed build fails the tests.
pytestmark = pytest.mark.skipif(not (os.environ.get("CXX") or shutil.which("c++")),
                                reason="no C++ compiler here")


def _dense(q, k, v, scale, q_pos=None, k_pos=None, window=None, kv_mask=None, segments=None):
    """softmax(scale q.k) v over the pairs that may attend (|q_pos - k_pos| <= window // 2, a
    real key, equal segment ids), written out; a query with none gets 0."""
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
    ok = jnp.ones((q.shape[0], q.shape[1], k.shape[1]), bool)
    if window is not None:
        ok &= jnp.abs(q_pos[:, :, None] - k_pos[:, None, :]) <= window // 2
    if kv_mask is not None:
        ok &= kv_mask[:, None, :]
    if segments is not None:
        ok &= segments[0][:, :, None] == segments[1][:, None, :]
    ok = ok[:, None]
    p = jax.nn.softmax(jnp.where(ok, logits, -1e30), axis=-1) * ok
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def _inputs(len_q, len_k, dim, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((B, n, H, dim)) for n in (len_q, len_k, len_k, len_q)]
    return [jnp.asarray(x, jnp.float32) for x in arrays]


def test_the_kernel_builds_and_registers():
    assert native.library_path() is not None and native._registered()


def _out_and_grads(fn, q, k, v, ct):
    out = jax.jit(fn)(q, k, v)
    grads = jax.jit(jax.grad(lambda *a: jnp.sum(fn(*a) * ct), argnums=(0, 1, 2)))(q, k, v)
    return out, grads


def _assert_close(got, want):
    (out, grads), (ref_out, ref_grads) = got, want
    np.testing.assert_allclose(out, ref_out, err_msg="output", **TOL)
    for name, g, rg in zip(("dq", "dk", "dv"), grads, ref_grads):
        np.testing.assert_allclose(g, rg, err_msg=name, **TOL)


@pytest.mark.parametrize("dim", native.HEAD_DIMS)
def test_global_attention_equals_the_definition(dim, monkeypatch):
    # 150 queries over 200 keys, blocks of 64 x 64: three query blocks (the last one short),
    # four key blocks per row (the last short), so the running max is rescaled; the backward's
    # 96-key blocks end short too.
    monkeypatch.setattr(native, "BLOCK_Q", 64)
    monkeypatch.setattr(native, "BLOCK_K", 64)
    q, k, v, ct = _inputs(150, 200, dim)
    q = q * 3.0  # logits of several units: rows whose maximum moves between key blocks
    scale = dim ** -0.5
    got = _out_and_grads(lambda a, b, c: native.attention(a, b, c, scale), q, k, v, ct)
    _assert_close(got, _out_and_grads(lambda a, b, c: _dense(a, b, c, scale), q, k, v, ct))


@pytest.mark.parametrize("key_dim, dim", [(8, 8), (64, 64), (72, 8)])
def test_batches_claimed_row_by_row_equal_the_definition(key_dim, dim, monkeypatch):
    # 5 batch rows (at least the kernel's kRowClaims: each thread claims a whole row's pairs
    # and query blocks) of 3 heads, 2 query blocks each, every row padded differently; key
    # dims as the grid's RoPE and XL use them (72: a factored term's [q | q_extra] width).
    monkeypatch.setattr(native, "BLOCK_Q", 32)
    monkeypatch.setattr(native, "BLOCK_K", 64)
    rng = np.random.default_rng(key_dim)
    batch, length, heads = 5, 45, 3
    q, k = (jnp.asarray(rng.standard_normal((batch, length, heads, key_dim)), jnp.float32)
            for _ in range(2))
    v, ct = (jnp.asarray(rng.standard_normal((batch, length, heads, dim)), jnp.float32)
             for _ in range(2))
    kv_mask = jnp.asarray(np.arange(length)[None] < np.array([[45], [30], [45], [7], [44]]))
    scale = key_dim ** -0.5
    assert native._registered()
    got = _out_and_grads(lambda a, b, c: native.attention(a, b, c, scale, kv_mask=kv_mask),
                         q, k, v, ct)
    _assert_close(got, _out_and_grads(lambda a, b, c: _dense(a, b, c, scale, kv_mask=kv_mask),
                                      q, k, v, ct))



@pytest.mark.parametrize("key_dim, dim, case", [
    (64, 64, "global"), (8, 8, "window and padding"), (72, 8, "factored, padding"),
    (24, 8, "extra columns")])
def test_long_inputs_backward_through_contiguous_rows_equals_the_definition(key_dim, dim, case):
    # 530 queries over 600 keys: past the backward's kContiguousFrom (512), where it copies a
    # pair's rows of q, d_out and k together and sums dQ, dK and dV apart from the arrays;
    # 600 = 6 key blocks of 96 and a short one. Padding leaves each row's keys a different
    # prefix, so some tiles run as a rectangle and some masked.
    rng = np.random.default_rng(key_dim + dim)
    len_q, len_k = 530, 600
    q = jnp.asarray(rng.standard_normal((B, len_q, H, key_dim)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((B, len_k, H, key_dim)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((B, len_k, H, dim)), jnp.float32)
    ct = jnp.asarray(rng.standard_normal((B, len_q, H, dim)), jnp.float32)
    kw = {}
    if "padding" in case:
        kw["kv_mask"] = jnp.asarray(np.arange(len_k)[None] < np.array([[600], [431]]))
    if "window" in case:
        pos = jnp.broadcast_to(jnp.arange(len_k, dtype=jnp.int32), (B, len_k))
        kw.update(q_pos=pos[:, :len_q], k_pos=pos, window=150)
    scale = key_dim ** -0.5
    assert native._registered()
    if case == "extra columns":  # q's and k's last 16 columns as q_extra, k_extra (XL's form)
        got = _out_and_grads(lambda a, b, c: native.attention(
            a[..., :dim], b[..., :dim], c, scale, q_extra=a[..., dim:],
            k_extra=b[..., dim:]), q, k, v, ct)
    else:
        got = _out_and_grads(lambda a, b, c: native.attention(a, b, c, scale, **kw), q, k, v,
                             ct)
    _assert_close(got, _out_and_grads(lambda a, b, c: _dense(a, b, c, scale, **kw), q, k, v,
                                      ct))

@pytest.mark.parametrize("shape", [(80, 64), (37, 13), (8, 8), (1, 5), (130, 24)])
def test_the_transpose_is_exact_and_its_own_gradient(shape):
    # Whole 8 x 8 blocks, edges in both directions, a strip of rows past one task (64).
    assert native.transpose_usable(jnp.zeros((1, 1), jnp.float32))
    x = jnp.asarray(np.random.default_rng(4).standard_normal(shape), jnp.float32)
    np.testing.assert_array_equal(jax.jit(native.transpose)(x), np.asarray(x).T)
    ct = jnp.asarray(np.random.default_rng(5).standard_normal(shape[::-1]), jnp.float32)
    grad = jax.grad(lambda a: jnp.sum(native.transpose(a) * ct))(x)
    np.testing.assert_array_equal(grad, np.asarray(ct).T)


@pytest.mark.parametrize("dim", [8, 16])
def test_row_counts_that_end_in_every_tile_size(dim):
    # The products run rows in tiles of R (16 at head_dim 8), then 2, then 1: 37 queries and
    # 45 keys leave each kind of remainder in the forward and in the backward's key rows.
    q, k, v, ct = _inputs(37, 45, dim, seed=3)
    scale = dim ** -0.5
    got = _out_and_grads(lambda a, b, c: native.attention(a, b, c, scale), q, k, v, ct)
    _assert_close(got, _out_and_grads(lambda a, b, c: _dense(a, b, c, scale), q, k, v, ct))


@pytest.mark.parametrize("dim, window, order", [
    (32, 48, "in order"), (64, 31, "shuffled"), (128, 5, "in order"), (64, 400, "in order")])
def test_a_local_layers_window_equals_the_definition(dim, window, order):
    # Window 5 over 64-token tiles: most tiles are skipped and a query's first tiles hold no
    # key it may attend; shuffled positions put window pairs in every tile; 400 covers all.
    length = 190
    q, k, v, ct = _inputs(length, length, dim, seed=1)
    rng = np.random.default_rng(2)
    pos = np.tile(np.arange(length), (B, 1))
    if order == "shuffled":
        pos = np.stack([rng.permutation(row) for row in pos])
    pos = jnp.asarray(pos, jnp.int32)
    scale = dim ** -0.5
    got = _out_and_grads(lambda a, b, c: native.attention(a, b, c, scale, pos, pos, window),
                         q, k, v, ct)
    want = _out_and_grads(lambda a, b, c: _dense(a, b, c, scale, pos, pos, window), q, k, v,
                          ct)
    _assert_close(got, want)


def test_a_query_with_no_key_in_its_window_gets_zeros_not_nan():
    q, k, v, ct = _inputs(40, 40, 32)
    q_pos = jnp.broadcast_to(jnp.arange(40, dtype=jnp.int32), (B, 40))
    k_pos = q_pos + 1000  # every key out of every query's window
    out, grads = _out_and_grads(
        lambda a, b, c: native.attention(a, b, c, 0.2, q_pos, k_pos, 16), q, k, v, ct)
    assert not np.any(out) and all(not np.any(g) for g in grads)


def _dims(dim):
    return Dims(num_heads=H, head_dim=dim, hidden=H * dim, max_length=256, vocab_size=32)


def test_padding_and_packed_segments_equal_the_definition(monkeypatch):
    # Row 0: three packed examples (the last of 5 keys) and 37 padding keys; query 3 has a
    # segment no key has (its output 0). Row 1: one example, no padding. Blocks of 32 x 64:
    # tiles wholly padding or of other examples are skipped, the rest masked or not.
    monkeypatch.setattr(native, "BLOCK_Q", 32)
    monkeypatch.setattr(native, "BLOCK_K", 64)
    length = 200
    q, k, v, ct = _inputs(length, length, 64, seed=4)
    seg = np.ones((B, length), np.int32)
    seg[0, 60:158] = 2
    seg[0, 158:163] = 3
    kv_mask = np.ones((B, length), bool)
    kv_mask[0, 163:] = False
    q_seg = seg.copy()
    q_seg[0, 3] = 7
    segments = (jnp.asarray(q_seg), jnp.asarray(seg))
    kv_mask = jnp.asarray(kv_mask)
    for window in (None, 40):
        pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (B, length))
        got = _out_and_grads(lambda a, b, c: native.attention(
            a, b, c, 0.125, pos, pos, window, kv_mask=kv_mask, segment_ids=segments),
            q, k, v, ct)
        want = _out_and_grads(lambda a, b, c: _dense(
            a, b, c, 0.125, pos, pos, window, kv_mask=kv_mask, segments=segments), q, k, v, ct)
        _assert_close(got, want)
        assert not np.any(got[0][0, 3])


@pytest.mark.parametrize("dim", [8, 32])
@pytest.mark.parametrize("case", ["kv_mask", "kv_mask and segments", "queries from 32",
                                  "left padding"])
def test_padded_rows_equal_the_definition(dim, case, monkeypatch):
    # A padded batch's tiles reduce to a rectangle of real queries x a prefix of real keys
    # (Pairs::rectangle), run unmasked. Row 0 holds 45 real tokens of 100 (a key block ends
    # inside the real ones with blocks of 32 x 64), row 1 all 100. 'queries from 32': the
    # first 32 queries are of a segment no key has; 'left padding' is no rectangle (the
    # masked path).
    monkeypatch.setattr(native, "BLOCK_Q", 32)
    monkeypatch.setattr(native, "BLOCK_K", 64)
    length = 100
    q, k, v, ct = _inputs(length, length, dim, seed=5)
    real = np.arange(length)[None] < np.array([[45], [100]])
    if case == "left padding":
        real = real[:, ::-1]
    seg = real.astype(np.int32)
    q_seg = seg.copy()
    if case == "queries from 32":
        q_seg[:, :32] = 9
    kv_mask = jnp.asarray(real)
    segments = None if case == "kv_mask" else (jnp.asarray(q_seg), jnp.asarray(seg))
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (B, length))
    got = _out_and_grads(lambda a, b, c: native.attention(
        a, b, c, dim ** -0.5, pos, pos, None, kv_mask=kv_mask, segment_ids=segments),
        q, k, v, ct)
    want = _out_and_grads(lambda a, b, c: _dense(
        a, b, c, dim ** -0.5, pos, pos, None, kv_mask=kv_mask, segments=segments), q, k, v, ct)
    _assert_close(got, want)


def _rope():
    return positions.make("rope").bind(_dims(32))


def _runs_kernel(fn, *args) -> bool:
    return native.TARGET in jax.jit(fn).lower(*args).as_text()


@pytest.mark.parametrize("window, padded", [(None, False), (24, False), (None, True)])
def test_attend_runs_the_kernel_for_rope_with_the_references_numbers(window, padded):
    scheme = _rope()
    q, k, v, ct = _inputs(70, 70, 32, seed=3)
    kv_mask = jnp.asarray(np.arange(70)[None] < np.array([[70], [45]])) if padded else None

    def run(implementation):
        return lambda a, b, c: attend(a, b, c, scheme=scheme, window=window, kv_mask=kv_mask,
                                      implementation=implementation)

    assert _runs_kernel(run("auto"), q, k, v) and _runs_kernel(run("rows"), q, k, v)
    assert not _runs_kernel(run("reference"), q, k, v)
    _assert_close(_out_and_grads(run("auto"), q, k, v, ct),
                  _out_and_grads(run("reference"), q, k, v, ct))


@pytest.mark.parametrize("case", ["causal", "logn", "head_dim 24", "bfloat16", "alibi",
                                  "sinks"])
def test_everything_else_keeps_rows_xla_step(case):
    dim = 24 if case == "head_dim 24" else 32
    dtype = jnp.bfloat16 if case == "bfloat16" else jnp.float32
    q, k, v, _ = (x.astype(dtype) for x in _inputs(40, 40, dim))
    scheme = positions.make("alibi" if case == "alibi" else "rope").bind(_dims(dim))
    kw = {"causal": dict(causal=True), "logn": dict(logn_length=16.0),
          "sinks": dict(sinks=jnp.zeros((H,), jnp.float32))}.get(case, {})
    fn = lambda a, b, c: attend(a, b, c, scheme=scheme, implementation="rows", **kw)  # noqa: E731
    assert not _runs_kernel(fn, q, k, v)


def test_the_environment_or_a_missing_compiler_turns_it_off(tmp_path, monkeypatch):
    assert not native.enabled({native.ENV: "0"}) and native.enabled({})
    assert native.library_path({native.ENV: "off"}) is None
    # the line it logs, read at the call (caplog depends on the root logger's handlers, which
    # other tests in the same worker may have replaced)
    said = []
    monkeypatch.setattr(native.logging, "info", lambda msg, *args: said.append(msg % args))
    env = {"CXX": str(tmp_path / "no-such-compiler"), "XDG_CACHE_HOME": str(tmp_path)}
    assert native.library_path(env) is None
    assert any("was not built" in line for line in said), said
    monkeypatch.undo()
    built = tmp_path / "posjax" / "cpu_kernels"
    assert not any(p.suffix == ".so" for p in built.iterdir())  # no partial library left
    # Turned off in this process's environment: attend traces rows' XLA step instead.
    monkeypatch.setenv(native.ENV, "0")
    q, k, v, _ = _inputs(40, 40, 32)
    assert not _runs_kernel(lambda a, b, c: attend(a, b, c, scheme=_rope()), q, k, v)


_SHARDED = """
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from posjax.attention import native
assert native._registered() and len(jax.devices()) == 2
rng = np.random.default_rng(0)
q, k, v = (jnp.asarray(rng.standard_normal((2, 100, 2, 32)), jnp.float32) for _ in range(3))
loss = lambda a, b, c: jnp.sum(native.attention(a, b, c, 0.2) ** 2)
f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
want = f(q, k, v)
mesh = Mesh(np.array(jax.devices()), ("x",))
for spec in (P("x"), P(None, "x"), P(None, None, "x")):
    put = lambda x: jax.device_put(x, NamedSharding(mesh, spec))
    got = f(put(q), put(k), put(v))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
print("ok")
"""


@pytest.mark.slow
def test_inputs_sharded_over_two_devices_give_the_same_numbers():
    # XLA cannot split a custom call: it gathers the inputs and runs it whole (per device).
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
               + " --xla_force_host_platform_device_count=2")
    run = subprocess.run([sys.executable, "-c", _SHARDED], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
