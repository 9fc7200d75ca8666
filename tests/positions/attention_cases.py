"""Masked attention cases that scheme tests share: 2 rows of 11 tokens, causal with padding
and bidirectional with two packed examples whose positions restart."""

from __future__ import annotations

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
