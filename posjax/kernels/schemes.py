"""Bound scheme -> its fused term (terms/) and the term's arrays; which schemes the kernels
support.

Which schemes the kernels compute is the term registry (terms/base.py: one `@term_for`
class per fused scheme class), so `supports` and `describe` are lookups in it. Everything a
term's `build` does is plain JAX outside the custom_vjp, so the gradients of these
preparations (KERPLE's straight-through clamp, the T5 / DeBERTa table transposes, the zero
padding of the tables, FoX's per-token sums) come from JAX itself.
"""

from __future__ import annotations

from typing import Optional

from posjax.kernels.terms import REGISTRY, Built, Call, term_class
from posjax.positions.base import Scheme


# The exact scheme classes of the built-in terms (terms/__init__.py imports them all; a term
# registered later is supported too). Subclasses may change the math, so they are not assumed.
FUSED_SCHEMES = tuple(REGISTRY)


# Hooks whose per-forward state the kernels have no input for, unless the scheme is fused:
# per-token arrays prepared once per forward (FoX's are: terms/fox.py), gate counts carried
# across key blocks (CoPE), a softmax replaced by weights carried outward from the query
# (normalize: stick-breaking) and q.k replaced by scores carried outward (carried_scores and
# its key tiles' carried_keys: PaTH). Asking for the kernel with such a scheme is refused
# with a ConfigError (`refusal`), not silently run elsewhere. Tile-local hooks without a term
# (length_scale: SSMax; map_logits: DAPE's MLP over all heads of a tile's logits) are not
# here: `supports` is False for them, so 'kernel' falls back to 'chunked' (the same numbers).
UNTILEABLE_HOOKS = ("prepare", "token_bias", "count_gates", "count_logits", "normalize",
                    "carried_scores", "carried_keys")


def refusal(scheme: Optional[Scheme]) -> Optional[str]:
    """Why the kernel path can never run `scheme` (one clause for an error message), or None."""
    if not isinstance(scheme, Scheme) or term_class(scheme) is not None:
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
    `embed`), and every scheme class with a registered term (terms/): Rope with every
    pairing / partial rotation / scaling (none, linear, ntk, dynamic_ntk, yarn, llama3,
    longrope, proportional), xPos, ALiBi (symmetric or one-sided), KERPLE (log, power), T5
    (both directions), Shaw, NEZHA, DeBERTa (c2p and/or p2c, any buckets) and FoX (its
    per-token sums from `prepare`, outside the kernel, as inputs). Everything else (ReRoPE,
    Sandwich, FIRE, XL, TUPE, subclasses of the above) is not, and attention falls back to
    'chunked'. On TPU, RoPE / xPos rotate q and k in XLA before the kernel (terms/rope.py),
    so they are exact there too.
    """
    if scheme is None:
        return True
    if not isinstance(scheme, Scheme):
        return False
    if not scheme.attention_hooks:
        return type(scheme).logit_scale is Scheme.logit_scale
    return term_class(scheme) is not None


def describe(scheme: Scheme, call: Call) -> Built:
    """The fused term of a supported, bound scheme, its arrays and q / k for the kernels
    (no term for a scheme without attention hooks)."""
    term_cls = term_class(scheme)
    if term_cls is None:
        return Built(None, {}, call.q, call.k)
    return term_cls.build(scheme, call)
