"""What scheme tests of attention paths share: the masked cases (2 rows of 11 tokens, causal
with padding and bidirectional with two packed examples whose positions restart), and the
largest array a traced program makes (an O(n)-memory path's check)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

B, L = 2, 11  # the rows below are written for this shape


def padded_and_packed():
    """[(causal, kwargs of attend, positions [B, L], allowed [B, L, L])]: causal with 4
    padding keys in row 1; bidirectional with packed segments."""
    ar = np.arange(L)
    lengths = np.array([L, 7])  # row 1: 4 padding keys
    kv_mask = ar[None] < lengths[:, None]
    pos = np.broadcast_to(ar, (B, L))
    causal_allowed = (ar[None, None, :] <= ar[None, :, None]) & kv_mask[:, None, :]
    seg = np.array([[1] * 6 + [2] * 5, [1] * 4 + [2] * 7])  # packed, positions restart
    seg_pos = np.stack([np.r_[np.arange(6), np.arange(5)], np.r_[np.arange(4), np.arange(7)]])
    seg_allowed = seg[:, :, None] == seg[:, None, :]
    segs = (jnp.asarray(seg, jnp.int32),) * 2
    return [(True, dict(kv_mask=jnp.asarray(kv_mask)), pos, causal_allowed),
            (False, dict(segment_ids=segs), seg_pos, seg_allowed)]


def largest_array(fn, *args) -> int:
    """Elements of the largest value jax.make_jaxpr(fn)(*args) makes, nested jaxprs (scans,
    loops, custom VJPs) included."""
    def avals(jaxpr):
        for eqn in jaxpr.eqns:
            yield from (var.aval for var in eqn.outvars)
            for param in eqn.params.values():
                for sub in param if isinstance(param, (tuple, list)) else (param,):
                    sub = getattr(sub, "jaxpr", sub)
                    if hasattr(sub, "eqns"):
                        yield from avals(sub)

    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    return max(math.prod(a.shape) for a in avals(jaxpr) if hasattr(a, "shape"))
