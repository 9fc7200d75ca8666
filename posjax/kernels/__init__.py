"""Pallas flash attention with the position schemes fused in: GPU (Triton), TPU (Mosaic) and
CPU (Pallas interpret mode).

  flash_attention(q, k, v, *, scheme, params, q_pos, k_pos, kv_mask, segment_ids, causal,
                  logn_length, block_q, block_k, interpret=None, layout=None) -> [B, Lq, H, D]
  supports(scheme) -> bool   exactly the schemes whose hooks the kernel computes (the same
                             set on every backend)

posjax.attention calls these for implementation='kernel' (and 'auto' on GPU/TPU); unsupported
schemes fall back to the chunked XLA path there. Layers: dispatch.py (entry, scheme -> small
arrays, padding, blocks, layout), core.py (the custom_vjp: each pass's grid, inputs and
gradient reductions), flash.py (the forward / dq / dkv kernel bodies), layout.py (the
'flat' and 'tpu' block layouts, pallas_call plumbing), fused.py (per-scheme tile math run
inside the kernels).

What TPU support means: with the 'tpu' block layout (layout.py) the forward and both backward
kernels of every fused scheme COMPILE with libtpu for TPU v4, v5e, v5p, v6e and TPU7x,
deviceless on a CPU machine (a described topology, jax.experimental.topologies;
tests/kernels/test_lowering_tpu.py for v5e, bench/tpu_compile.py for all five at up to 128k
tokens), and that layout run in interpret mode matches the reference
(tests/kernels/test_layout.py). They have NOT run on TPU hardware (numbers and speed there
are unmeasured). On TPU the other sequence streams through VMEM one block per step of an
'arbitrary' inner grid axis, so VMEM per program does not grow with the length.
"""

from posjax.kernels.dispatch import flash_attention, supports

__all__ = ["flash_attention", "supports"]
