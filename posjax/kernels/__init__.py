"""Pallas flash attention with the position schemes fused in: GPU (Triton), TPU (Mosaic) and
CPU (Pallas interpret mode).

  flash_attention(q, k, v, *, scheme, params, q_pos, k_pos, kv_mask, segment_ids, causal,
                  logn_length, block_q, block_k, interpret=None, layout=None) -> [B, Lq, H, D]
  supports(scheme) -> bool   exactly the schemes whose hooks the kernel computes (the same
                             set on every backend)
  refusal(scheme) -> str     why the kernel can never run a scheme (CoPE), else None

posjax.attention.attend calls them for implementation='kernel' (and 'auto' on GPU/TPU);
unsupported schemes fall back to the chunked XLA path there, except those `refusal` names: an
explicit 'kernel' with one of them is a ConfigError. Modules, top down:
  dispatch.py  flash_attention: backend, blocks, padding, layout, shard_map
  schemes.py   supports / refusal / describe: lookups in the term registry
  terms/       one module per fused scheme family, each a `Term` registered by the scheme
               classes it computes (`@term_for(Alibi)`): its kernel arrays and their
               placements, its per-tile logit / bias / value terms and their gradients
               (terms/base.py: the contract). The only kernel modules that know schemes.
  cases.py     FUSED_CASES, one config per fused scheme (shared by tests/kernels and bench/)
  vjp.py       the custom_vjp: each pass's grid, inputs and gradient reductions
  flash.py     the forward / dq / dkv kernel bodies, which call the terms' hooks per tile
  layout.py    the 'flat' and 'tpu' block layouts, pallas_call plumbing
  band.py      a local layer's band: which blocks each program walks, and its check
  tile.py      tile math shared by the kernels and the terms (dots, row gathers, tile_vjp)
The mask value, the log-n key counting and the band's check come from posjax.tiling, shared
with attention's XLA paths. kernels/ imports only posjax.positions, posjax.tiling and
posjax.errors: attention sits above it and imports it.

TPU: with the 'tpu' block layout the forward and both backward kernels of every fused scheme
compile with libtpu deviceless on a CPU machine (tests/kernels/test_lowering_tpu.py,
bench/tpu_compile.py), and that layout run in interpret mode matches the reference
(tests/kernels/test_layout.py); what has been compiled and run is recorded in bench/README.md.
On TPU the other sequence streams through VMEM one block per step of an 'arbitrary' inner grid
axis, so VMEM per program does not grow with the length.

Fusing a new scheme (checklist):
  1. The scheme must already be correct in posjax.attention (reference == chunked).
  2. terms/<name>.py: a frozen dataclass `Term` subclass with `@term_for(TheScheme)`: its
     `build` (arrays from the bound scheme and params; anything clamped or transposed there
     gets its gradient from JAX), `inputs` (each array's placement), the hooks it adds
     (`bias`, `logits`, `values`, ...) calling the positions module's formula on the tile,
     and `grads` / `grad_step` for learnable arrays (tile.tile_vjp differentiates the
     formula). Import the module in terms/__init__.py.
  3. cases.py: add its FUSED_CASES entry; the tests (kernel vs reference, fwd + grads, in
     interpret mode; Triton and TPU lowering) and the bench compile scripts pick it up.
flash, vjp, layout and dispatch do not change (tests/kernels/test_terms.py fuses a toy
scheme with nothing but a term).
"""

from posjax.kernels.dispatch import flash_attention
from posjax.kernels.schemes import refusal, supports

__all__ = ["flash_attention", "refusal", "supports"]
