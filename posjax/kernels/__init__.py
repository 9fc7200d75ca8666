"""Pallas flash attention with the position schemes fused in (GPU Triton, and interpret mode
on CPU; TPU Mosaic is not supported yet, so supports() is False there).

  flash_attention(q, k, v, *, scheme, params, q_pos, k_pos, kv_mask, segment_ids, causal,
                  logn_length, block_q, block_k, interpret=None) -> [B, Lq, H, D]
  supports(scheme) -> bool   exactly the schemes whose hooks the kernel computes

posjax.attention calls these for implementation='kernel' (and 'auto' on GPU/TPU); unsupported
schemes fall back to the chunked XLA path there. Layers: dispatch.py (entry, scheme -> small
arrays, padding, blocks), flash.py (pallas_call forward / dq / dkv and the custom_vjp),
fused.py (per-scheme tile math run inside the kernels).
"""

from posjax.kernels.dispatch import flash_attention, supports

__all__ = ["flash_attention", "supports"]
