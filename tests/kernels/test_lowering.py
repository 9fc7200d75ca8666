"""The kernels lower to Triton without a GPU: jax.export for platform 'cuda' runs the Pallas
Triton lowering (kernel jaxpr -> Triton-dialect MLIR, with its checks: power-of-two shapes,
supported primitives) on this CPU machine, for the forward and both backward kernels of
every fused scheme with every mask path switched on (padding, segments, causal, log-n).

What this does NOT cover: Triton's own compilation to PTX and cubin (inside XLA:GPU at
compile time; bench/gpu_compile.py does it for an H200 without a GPU, with the CUDA wheels
in a separate environment) and running on a device (bench/device.sh, on a real GPU).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import export

from posjax.kernels import dispatch, flash_attention
from posjax.kernels.cases import FUSED_CASES, bind_case

from tests.kernels.support import pallas_calls

B, L, H, D = 2, 200, 2, 64  # L not a block multiple
# Every fused case, plus the RoPE paths that only the wrapper's padding and permutation see.
CASES = {
    **FUSED_CASES,
    "rope_half_partial": {"name": "rope", "interleaved": False, "rotary_dim": 32,
                          "scaling": "dynamic_ntk", "factor": 2.0, "original_length": 64},
    "rope_d80": {"name": "rope", "interleaved": True},  # D=80: padded to Triton widths
}
DIMS = {"rope_d80": 80}
TRITON_CALL = "__gpu$xla.gpu.triton"


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_lowers_to_triton(case, monkeypatch):
    monkeypatch.setattr(dispatch, "target_backend", lambda: "gpu")  # target GPU from this CPU
    dim = DIMS.get(case, D)
    scheme = bind_case(CASES[case], H, dim, 1024)
    params = scheme.init_layer(jax.random.PRNGKey(0))
    x = jnp.zeros((B, L, H, dim), jnp.bfloat16)
    kv_mask = jnp.arange(L)[None, :] < jnp.asarray([[L], [150]])
    seg = jnp.ones((B, L), jnp.int32)

    def grads(q, k, v, params):
        def loss(q, k, v, params):
            out = flash_attention(q, k, v, scheme=scheme, params=params, kv_mask=kv_mask,
                                  segment_ids=(seg, seg), causal=True, logn_length=128,
                                  block_q=64, block_k=64, interpret=False)
            return jnp.sum(out.astype(jnp.float32))

        return jax.grad(loss, argnums=(0, 1, 2, 3))(q, k, v, params)

    exported = export.export(
        jax.jit(grads), platforms=["cuda"],
        disabled_checks=[export.DisabledSafetyCheck.custom_call(TRITON_CALL)],
    )(x, x, x, params)
    text = exported.mlir_module()
    for kernel in ("posjax_flash_fwd", "posjax_flash_dq", "posjax_flash_dkv"):
        assert f'name = "{kernel}"' in text, kernel
    assert text.count(TRITON_CALL) >= 3


def test_window_band_and_sinks_lower_to_triton(monkeypatch):
    # A local layer with sinks and given positions: each pass is a lax.cond between the
    # band's kernel (dynamic fori_loop bounds from the program id) and every block's
    # (band.py), so both variants of the three kernels lower. 200 tokens in 4 blocks of 64,
    # |i - j| <= 16: a query block walks at most 3 key blocks.
    monkeypatch.setattr(dispatch, "target_backend", lambda: "gpu")
    scheme = bind_case(CASES["fox"], H, D, 1024)
    params = scheme.init_layer(jax.random.PRNGKey(0))
    x = jnp.zeros((B, L, H, D), jnp.bfloat16)
    pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
    kv_mask = jnp.arange(L)[None, :] < jnp.asarray([[L], [150]])

    def grads(q, k, v, params, sinks):
        def loss(q, k, v, params, sinks):
            out = flash_attention(q, k, v, scheme=scheme, params=params, q_pos=pos, k_pos=pos,
                                  kv_mask=kv_mask, window=32, sinks=sinks, block_q=64,
                                  block_k=64, interpret=False)
            return jnp.sum(out.astype(jnp.float32))

        return jax.grad(loss, argnums=(0, 1, 2, 3, 4))(q, k, v, params, sinks)

    exported = export.export(
        jax.jit(grads), platforms=["cuda"],
        disabled_checks=[export.DisabledSafetyCheck.custom_call(TRITON_CALL)],
    )(x, x, x, params, jnp.zeros((H,), jnp.float32))
    text = exported.mlir_module()
    for kernel in ("posjax_flash_fwd", "posjax_flash_dq", "posjax_flash_dkv"):
        assert text.count(f'name = "{kernel}"') >= 2, kernel  # band and every block
    assert text.count(TRITON_CALL) >= 6


def test_gpu_tiles_at_most_64_with_eight_warps(monkeypatch):
    # attend() passes 128 x 128 (meant for the chunked path); compiled for a GPU the kernels
    # take at most 64 x 64 tiles with 8 warps, the settings that compile for an H200 without
    # spilling much (bench/gpu_compile_h200.md: at 128 x 128, head dim 64 fails in Triton).
    monkeypatch.setattr(dispatch, "target_backend", lambda: "gpu")
    x = jnp.zeros((1, 512, 2, 64), jnp.bfloat16)

    def grads(q):
        def loss(q):
            out = flash_attention(q, q, q, block_q=128, block_k=128, interpret=False)
            return jnp.sum(out.astype(jnp.float32))

        return jax.grad(loss)(q)

    calls = list(pallas_calls(jax.make_jaxpr(grads)(x).jaxpr))
    assert len(calls) == 3
    for eqn in calls:
        assert eqn.params["grid_mapping"].grid == (1, 2, 512 // dispatch.MAX_BLOCK_GPU)
        assert eqn.params["compiler_params"].num_warps == 8


def test_the_model_path_builds_the_kernels_of_the_target(monkeypatch):
    # attend(implementation='kernel') leaves `interpret` to dispatch. Compiling for a described
    # GPU from this CPU process, it must build the Triton kernel, not the kernel's
    # interpret-mode emulation (a program of XLA loops): bench/tpu_compile.py --parts train
    # and bench/gpu_train_compile.py compile whole train steps this way.
    from posjax.attention import attend

    monkeypatch.setattr(dispatch, "target_backend", lambda: "gpu")
    x = jnp.zeros((1, 64, 2, 64), jnp.bfloat16)
    exported = export.export(
        jax.jit(lambda q: attend(q, q, q, implementation="kernel")), platforms=["cuda"],
        disabled_checks=[export.DisabledSafetyCheck.custom_call(TRITON_CALL)],
    )(x)
    assert exported.mlir_module().count(TRITON_CALL) == 1
