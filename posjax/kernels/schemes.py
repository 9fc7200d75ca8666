"""Bound scheme -> the kernel's static `Fused` description and its small arrays.

The only kernel module that knows scheme classes: `supports` says which schemes the kernels
compute exactly, `describe` turns one (with its params) into what fused.py computes per tile.
Everything here is plain JAX outside the custom_vjp, so the gradients of these preparations
(KERPLE's straight-through clamp, the T5 / DeBERTa table transposes, the zero padding of the
tables) come from JAX itself.
"""

from __future__ import annotations

from typing import Optional

import jax.numpy as jnp
import numpy as np

from posjax.kernels.fused import Fused
from posjax.positions.base import Scheme
from posjax.positions.bias import Alibi, Kerple, alibi_slopes, straight_through_clamp
from posjax.positions.deberta import Deberta
from posjax.positions.fox import Fox
from posjax.positions.relative import Nezha, Shaw, nezha_table
from posjax.positions.rotary import Rope, rope_inv_freq
from posjax.positions.xpos import XPos
from posjax.positions.t5 import T5

# Exact classes the kernel fuses (subclasses may change the math, so they are not assumed).
FUSED_SCHEMES = (Rope, XPos, Alibi, Kerple, T5, Shaw, Nezha, Deberta, Fox)


# Hooks whose per-forward state the kernels have no input for, unless the scheme is fused:
# per-token arrays prepared once per forward (FoX's are: tokens.py) and gate counts carried
# across key blocks (CoPE). Asking for the kernel with such a scheme is refused with a
# ConfigError (`refusal`), not silently run elsewhere.
UNTILEABLE_HOOKS = ("prepare", "token_bias", "count_gates", "count_logits")


def refusal(scheme: Optional[Scheme]) -> Optional[str]:
    """Why the kernel path can never run `scheme` (one clause for an error message), or None."""
    if not isinstance(scheme, Scheme) or type(scheme) in FUSED_SCHEMES:
        return None
    needs = [h for h in scheme.hooks if h in UNTILEABLE_HOOKS]
    if not needs:
        return None
    return (f"position '{scheme.name}' needs per-forward state the Pallas kernel has no input "
            f"for (its {'/'.join(needs)} hooks)")


def supports(scheme: Optional[Scheme]) -> bool:
    """True iff flash_attention computes this scheme's attention hooks exactly (the same set
    on every backend: GPU/Triton, TPU/Mosaic, CPU interpret mode).

    Fused: no attention hook at all (NoPE and the absolute schemes, whose only hook is
    `embed`), Rope with every pairing / partial rotation / scaling (none, linear, ntk,
    dynamic_ntk, yarn), xPos, ALiBi (symmetric or one-sided), KERPLE (log, power), T5 (both
    directions), Shaw, NEZHA, DeBERTa (c2p and/or p2c, any buckets) and FoX (its per-token
    sums from `prepare`, outside the kernel, as inputs; tokens.py). Everything else
    (ReRoPE, Sandwich, FIRE, XL, TUPE, subclasses of the above) is not, and attention falls
    back to 'chunked'. On TPU, RoPE / xPos rotate q and k in XLA before the kernel
    (dispatch.flash_attention), so they are exact there too.
    """
    if scheme is None:
        return True
    if not isinstance(scheme, Scheme):
        return False
    if not scheme.attention_hooks:
        return type(scheme).logit_scale is Scheme.logit_scale
    return type(scheme) in FUSED_SCHEMES


def describe(scheme: Scheme, params, q, k_pos) -> tuple[Fused, dict]:
    """The static description and the small arrays of a supported, bound scheme.

    q [B, L, H, D] gives the batch, heads and head dim; k_pos the positions (dynamic NTK
    scales RoPE by the length). Arrays: "inv_freq"/"xpos" [B, R/2] (rope), "hp" per-head
    values (ALiBi slopes [H, 1], KERPLE [H, 2], T5 [H, NBp]), "tabk"/"tabv" tables
    ([Rp, D] Shaw/NEZHA, [H, Rp, D] DeBERTa); table rows are padded to powers of two
    (Triton wants power-of-two shapes).
    """
    dim, heads = q.shape[-1], q.shape[2]
    scale = float(scheme.logit_scale(dim))
    if isinstance(scheme, Rope):
        rot = scheme.rotary_size(dim)
        inv_freq = jnp.asarray(scheme.inv_freq(dim, k_pos), jnp.float32)
        inv_freq = jnp.broadcast_to(inv_freq, (q.shape[0], rot // 2))
        fused = Fused("rope", scale, half=rot // 2, interleaved=bool(scheme.interleaved))
        return fused, {"inv_freq": inv_freq}
    if isinstance(scheme, XPos):
        # RoPE on all dims with the per-pair scale zeta**(+-pos/scale_base) (xpos_scale):
        # the kernel multiplies cos/sin by exp(+-pos * log(zeta)/scale_base).
        zeta = (np.arange(0, dim, 2) + scheme.gamma * dim) / ((1 + scheme.gamma) * dim)
        log_zeta = jnp.asarray(np.log(zeta) / scheme.scale_base, jnp.float32)
        rows = (q.shape[0], dim // 2)
        fused = Fused("rope", scale, half=dim // 2, interleaved=bool(scheme.interleaved))
        return fused, {
            "inv_freq": jnp.broadcast_to(rope_inv_freq(dim, scheme.base), rows),
            "xpos": jnp.broadcast_to(log_zeta, rows)}
    if isinstance(scheme, Alibi):
        slopes = jnp.asarray(alibi_slopes(heads), jnp.float32)[:, None]
        symmetric = True if scheme.symmetric is None else bool(scheme.symmetric)
        return Fused("alibi", scale, symmetric=symmetric), {"hp": slopes}
    if isinstance(scheme, Kerple):
        # The reference's straight-through clamp, applied outside the kernel: the kernel sees
        # the clamped values, JAX passes their gradient to the raw parameters unchanged.
        r1 = straight_through_clamp(params["r1"], scheme.eps)
        r2 = straight_through_clamp(params["r2"], scheme.eps,
                                    2.0 if scheme.variant == "power" else None)
        hp = jnp.stack([r1, r2], axis=-1).astype(jnp.float32)
        return Fused("kerple", scale, variant=scheme.variant), {"hp": hp}
    if isinstance(scheme, T5):
        table = params["table"].astype(jnp.float32).T  # [H, num_buckets]
        width = pow2(table.shape[-1])
        table = jnp.pad(table, ((0, 0), (0, width - table.shape[-1])))
        fused = Fused("t5", scale, bidirectional=scheme.bound_bidirectional,
                      num_buckets=scheme.num_buckets, max_distance=scheme.max_distance)
        return fused, {"hp": table}
    if isinstance(scheme, Deberta):
        return _deberta(scheme, params, scale)
    if isinstance(scheme, Fox):  # the sums c come from scheme.prepare (dispatch.py)
        return Fused("fox", scale), {}
    if isinstance(scheme, (Shaw, Nezha)):
        kmax = scheme.max_relative_position
        rows = 2 * kmax + 1
        pad = ((0, pow2(rows) - rows), (0, 0))
        if isinstance(scheme, Shaw):
            tabk = jnp.pad(params["keys"].astype(jnp.float32), pad)
            tabv = jnp.pad(params["values"].astype(jnp.float32), pad)
            fused = Fused("table", scale, max_rel=kmax, learn_tables=True)
            return fused, {"tabk": tabk, "tabv": tabv}
        tab = jnp.pad(nezha_table(kmax, dim), pad)
        return Fused("table", scale, max_rel=kmax, shared_table=True), {"tabk": tab}
    return Fused("none", scale), {}


def _deberta(scheme: Deberta, params, scale: float) -> tuple[Fused, dict]:
    """Per-head projected tables [2*span, H, D] -> [H, Rp, D] (rows padded to a power of two
    for Triton); the kernel computes the buckets itself with deberta_bucket."""
    span = scheme.span
    rows = 2 * span
    fused = Fused("deberta", scale, bucket_size=scheme.bucket_size,
                  max_position=scheme.max_position, span=span, c2p=bool(scheme.c2p),
                  p2c=bool(scheme.p2c))

    def per_head(name):
        table = jnp.transpose(params[name].astype(jnp.float32), (1, 0, 2))
        return jnp.pad(table, ((0, 0), (0, pow2(rows) - rows), (0, 0)))

    small = {}
    if scheme.c2p:
        small["tabk"] = per_head("pos_key")
    if scheme.p2c:
        small["tabv"] = per_head("pos_query")
    return fused, small


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(n - 1, 0).bit_length()


def interleaved_perm(rot: int, dim: int) -> np.ndarray:
    """Columns that put the interleaved pairs (2i, 2i+1) of the first `rot` dims into the
    half-split layout (i, i + rot/2); applied to q AND k it leaves every q.k unchanged."""
    return np.concatenate([np.arange(0, rot, 2), np.arange(1, rot, 2), np.arange(rot, dim)])

