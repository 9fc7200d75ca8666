"""Pallas flash attention with the position schemes fused in: GPU (Triton), TPU (Mosaic) and
CPU (Pallas interpret mode).

  flash_attention(q, k, v, *, scheme, params, q_pos, k_pos, kv_mask, segment_ids, causal,
                  logn_length, block_q, block_k, interpret=None, layout=None) -> [B, Lq, H, D]
  supports(scheme) -> bool   exactly the schemes whose hooks the kernel computes (the same
                             set on every backend)
  refusal(scheme) -> str     why the kernel can never run a scheme (CoPE), else None

posjax.attention calls these for implementation='kernel' (and 'auto' on GPU/TPU); unsupported
schemes fall back to the chunked XLA path there, except those `refusal` names: an explicit
'kernel' with one of them is a ConfigError. Modules, top down:
  dispatch.py  flash_attention: backend, blocks, padding, layout, shard_map
  schemes.py   bound scheme -> static `Fused` description + small arrays; `supports`. The only
               kernel module that knows scheme classes.
  cases.py     FUSED_CASES, one config per fused scheme (shared by tests/kernels and bench/)
  vjp.py       the custom_vjp: each pass's grid, inputs and gradient reductions
  flash.py     the forward / dq / dkv kernel bodies (fwd_kernel, dq_kernel, dkv_kernel)
  layout.py    the 'flat' and 'tpu' block layouts, pallas_call plumbing
  band.py      a local layer's band: which blocks each program walks, and its check
  fused.py     per-scheme tile math run inside the kernels
  tokens.py    FoX's per-token sums as kernel inputs: tile bias and its gradient
The mask value and the log-n key counting come from posjax.attention.tiles, shared with the
XLA paths. kernels/ imports only posjax.positions, posjax.attention.tiles and .banded (the
band's check, shared with the chunked path), and posjax.errors.

TPU: with the 'tpu' block layout the forward and both backward kernels of every fused scheme
compile with libtpu deviceless on a CPU machine (tests/kernels/test_lowering_tpu.py,
bench/tpu_compile.py), and that layout run in interpret mode matches the reference
(tests/kernels/test_layout.py); what has been compiled and run is recorded in bench/README.md.
On TPU the other sequence streams through VMEM one block per step of an 'arbitrary' inner grid
axis, so VMEM per program does not grow with the length.

Fusing a new scheme (checklist):
  1. The scheme must already be correct in posjax.attention (reference == chunked).
  2. fused.py: a `kind` (or reuse one) and its tile math: the bias / logit / value terms of a
     [bq, bk] tile from the tile's positions, plus the gradients of any learnable parameters
     (`bias_param_grads`, `table_grads`). Give every new `Fused` field one meaning.
  3. schemes.py: add the class to FUSED_SCHEMES and a branch of `describe` that builds the
     `Fused` description and its small arrays (per-head values in "hp", tables in
     "tabk"/"tabv"); anything clamped or transposed there gets its gradient from JAX.
  4. vjp.py / dispatch.py only if the scheme needs a new kind of input or shard split
     (`_per_shard`: per-head tables split with the heads).
  5. cases.py: add its FUSED_CASES entry; the tests (kernel vs reference, fwd + grads, in
     interpret mode; Triton and TPU lowering) and the bench compile scripts pick it up.
"""

from posjax.kernels.dispatch import flash_attention
from posjax.kernels.schemes import refusal, supports

__all__ = ["flash_attention", "refusal", "supports"]
