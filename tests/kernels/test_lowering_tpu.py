"""The kernels COMPILE for a real TPU without one: libtpu (a test dependency) describes a TPU
v5e slice that is not here (jax.experimental.topologies), and jit(...).lower(...).compile()
for one of its devices runs the whole TPU toolchain on this CPU machine: the Pallas Mosaic
lowering (block shapes: last two dims divisible by (8, 128) or equal to the array's; kernel
jaxpr -> Mosaic MLIR), then libtpu's Mosaic compiler (vector layouts, VMEM allocation: an
oversized block fails with CompileTimeScopedVmemOom, see test_vmem_overflow_is_caught) and
XLA's TPU pipeline. Checked here: the forward and BOTH backward kernels (through the
custom_vjp) of every fused scheme, float32 and bfloat16, with every mask path on (padding,
segments, causal, log-n) and once with none; and that on TPU the other sequence streams
block by block (VMEM O(block), not O(length)). bench/tpu_compile.py does the same for v4,
v5e, v5p, v6e and TPU7x at 8k-128k tokens.

What this does NOT cover: numbers and speed on TPU hardware (nothing runs; the 'tpu' layout's
numbers are checked in interpret mode in test_layout.py).
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

from posjax.kernels import dispatch, flash_attention
from posjax.kernels.cases import FUSED_CASES, bind_case

from tests.kernels.support import pallas_calls

# Slow tier: the TPU compiler on described chips.
pytestmark = pytest.mark.slow

# libtpu is the TPU compiler these tests run; it is not a runtime dependency.
pytest.importorskip("libtpu", reason="libtpu not installed: pip install -r requirements-tpu.txt")

B, L, H, D = 2, 200, 2, 64  # L not a block multiple (padded to 256)
CASES = FUSED_CASES
KERNELS = ("posjax_flash_fwd", "posjax_flash_dq", "posjax_flash_dkv")


@functools.cache
def _tpu() -> SingleDeviceSharding:
    """Placement on device 0 of a described TPU v5e slice (needs libtpu, not a TPU)."""
    return SingleDeviceSharding(topologies.get_topology_desc("v5e:2x2", "tpu").devices[0])


def _on_tpu(tree):
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=_tpu()), tree)


def _compile_grads(config, dtype, masks: bool, monkeypatch, length: int = L) -> str:
    """Compile grads of the kernel for TPU v5e; the lowered module's text."""
    monkeypatch.setattr(dispatch, "target_backend", lambda: "tpu")  # trace as on a TPU
    scheme = bind_case(config, H, D, 1024)
    params = scheme.init_layer(jax.random.PRNGKey(0))
    x = jnp.zeros((B, length, H, D), dtype)
    kwargs = {}
    if masks:
        seg = jnp.ones((B, L), jnp.int32)
        kwargs = dict(kv_mask=jnp.arange(L)[None, :] < jnp.asarray([[L], [150]]),
                      segment_ids=(seg, seg), causal=True, logn_length=128)

    def grads(q, k, v, params):
        def loss(q, k, v, params):
            # layout=None, interpret=False: what attend() runs on a TPU (default blocks 128).
            out = flash_attention(q, k, v, scheme=scheme, params=params, interpret=False,
                                  **kwargs)
            return jnp.sum(out.astype(jnp.float32))

        return jax.grad(loss, argnums=(0, 1, 2, 3))(q, k, v, params)

    lowered = jax.jit(grads).lower(*_on_tpu((x, x, x, params)))
    lowered.compile()  # libtpu: Mosaic + XLA TPU; raises on any failure
    return lowered.as_text()


# Every scheme in bf16, and in float32 the plain kernel plus the table / SMEM paths (the bench,
# bench/tpu_compile.py, compiles all 10 x 2 for five TPU generations).
F32_CASES = ("none", "t5", "shaw", "deberta")


@pytest.mark.parametrize("case,dtype", [(c, jnp.bfloat16) for c in sorted(CASES)]
                         + [(c, jnp.float32) for c in F32_CASES],
                         ids=[f"{c}-bf16" for c in sorted(CASES)] + [f"{c}-f32" for c in F32_CASES])
def test_compiles_for_tpu(case, dtype, monkeypatch):
    text = _compile_grads(CASES[case], dtype, True, monkeypatch)
    names = re.findall(r'kernel_name = "([a-z_]+)"', text)
    assert sorted(names) == sorted(KERNELS), names  # forward, dq, dkv: one call each
    assert text.count("stablehlo.custom_call @tpu_custom_call") == 3


def test_window_band_and_sinks_compile(monkeypatch):
    # A local layer with sinks and given positions: each pass is a lax.cond between the
    # band's kernels (an inner grid axis of the band's width, index maps that fetch block
    # lo + j) and every block's (band.py). 600 tokens in 5 blocks of 128, |i - j| <= 32.
    monkeypatch.setattr(dispatch, "target_backend", lambda: "tpu")
    scheme = bind_case(FUSED_CASES["alibi"], H, D, 1024)
    length = 600
    x = jnp.zeros((1, length, H, D), jnp.bfloat16)
    pos = jnp.arange(length, dtype=jnp.int32)[None]

    def grads(q, k, v, sinks):
        def loss(q, k, v, sinks):
            out = flash_attention(q, k, v, scheme=scheme, params={}, q_pos=pos, k_pos=pos,
                                  window=64, sinks=sinks, interpret=False)
            return jnp.sum(out.astype(jnp.float32))

        return jax.grad(loss, argnums=(0, 1, 2, 3))(q, k, v, sinks)

    lowered = jax.jit(grads).lower(*_on_tpu((x, x, x, jnp.zeros((H,), jnp.float32))))
    lowered.compile()
    text = lowered.as_text()
    names = re.findall(r'kernel_name = "([a-z_]+)"', text)
    assert sorted(names) == sorted(KERNELS * 2), names  # band and every block, per pass
    calls = list(pallas_calls(jax.make_jaxpr(grads)(x, x, x, jnp.zeros((H,), jnp.float32)).jaxpr))
    assert sorted(eqn.params["grid_mapping"].grid[3] for eqn in calls) == [3, 3, 3, 5, 5, 5]


def test_compiles_without_masks(monkeypatch):
    # No mask at all and a block-multiple length (no padding mask either): the kernels'
    # unmasked branch (no per-tile skip) compiles too.
    text = _compile_grads({"name": "alibi"}, jnp.bfloat16, False, monkeypatch, length=256)
    assert text.count("stablehlo.custom_call @tpu_custom_call") == 3


def test_streams_the_other_sequence(monkeypatch):
    # VMEM per program must not grow with the length: at 1024 tokens (8 blocks of 128) each
    # kernel walks the other sequence on a 4th, 'arbitrary' grid axis and no input block is
    # longer than one block along any axis (whole-sequence blocks would be copied to VMEM).
    monkeypatch.setattr(dispatch, "target_backend", lambda: "tpu")
    x = jnp.zeros((1, 1024, 2, 64), jnp.bfloat16)
    seg = jnp.ones((1, 1024), jnp.int32)

    def grads(q):
        def loss(q):
            out = flash_attention(q, q, q, segment_ids=(seg, seg), causal=True,
                                  logn_length=128, interpret=False)
            return jnp.sum(out.astype(jnp.float32))

        return jax.grad(loss)(q)

    calls = list(pallas_calls(jax.make_jaxpr(grads)(x).jaxpr))
    assert len(calls) == 3
    for eqn in calls:
        mapping = eqn.params["grid_mapping"]
        assert mapping.grid == (1, 2, 8, 8)
        semantics = eqn.params["compiler_params"].dimension_semantics
        assert tuple(str(s).lower().split(".")[-1] for s in semantics) == (
            "parallel", "parallel", "parallel", "arbitrary")
        for block in mapping.block_mappings:
            sizes = [getattr(dim, "block_size", 0) for dim in block.block_shape]
            assert max(sizes) <= 128, sizes


def test_vmem_overflow_is_caught():
    # The compile above is libtpu's real one, not a lowering check: a kernel whose block needs
    # more VMEM than the scoped limit (a 4096 x 4096 float32 block, 64 MiB in and out) fails
    # at compile time, while the same kernel with a small block compiles.
    def double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def compile_block(n):
        call = pl.pallas_call(double, out_shape=jax.ShapeDtypeStruct((n, n), jnp.float32))
        spec = jax.ShapeDtypeStruct((n, n), jnp.float32)
        return jax.jit(call).lower(*_on_tpu((spec,))).compile()

    compile_block(256)
    with pytest.raises(Exception, match="(?i)vmem"):
        compile_block(4096)


def test_compiles_per_shard_on_a_tpu_slice(monkeypatch):
    # On more than one TPU device XLA cannot partition a Mosaic kernel: without shard_axes the
    # compile is refused; with them (what the model passes under a mesh) the kernels run per
    # (batch, head) shard in shard_map and the program compiles for the 4-chip slice.
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    monkeypatch.setattr(dispatch, "target_backend", lambda: "tpu")
    devices = topologies.get_topology_desc("v5e:2x2", "tpu").devices
    mesh = Mesh(np.array(devices).reshape(2, 2), ("data", "tensor"))
    scheme = bind_case(FUSED_CASES["t5"], H, D, 1024)  # per-head table: split with the heads
    params = scheme.init_layer(jax.random.PRNGKey(0))
    x = jax.ShapeDtypeStruct((B, 256, H, D), jnp.bfloat16,
                             sharding=NamedSharding(mesh, P("data", None, "tensor")))
    p = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype,
                                                    sharding=NamedSharding(mesh, P())), params)

    def compile_grads(shard_axes):
        def loss(q, k, v, params):
            out = flash_attention(q, k, v, scheme=scheme, params=params, interpret=False,
                                  shard_axes=shard_axes)
            return jnp.sum(out.astype(jnp.float32))

        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3))).lower(x, x, x, p).compile()

    with pytest.raises(Exception, match="automatically partitioned"):
        compile_grads(None)
    compile_grads(("data", "tensor"))
