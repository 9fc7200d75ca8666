"""RoPE (every pairing, partial rotation and scaling) and xPos in the kernels: the q and k
tiles are rotated as they are loaded.

The kernels rotate the half-split pairing (i, i + R/2): `build` permutes the interleaved pairs
(2i, 2i+1) of q and k into it, which leaves every q.k unchanged, and the tile's two halves are
separate column pieces. xPos also scales each pair by zeta**(+pos/scale_base) for queries and
zeta**(-pos/scale_base) for keys; the scaled rotation stays linear, so `unrotate` with the
same (cos, sin) is still its transpose. Angles in float32 (as rope_angles), rotated tiles cast
back to the input dtype, as the reference.

'tpu' layout: the halves are lane slices at offset R/2 (not 128-aligned for common head dims),
so there the scheme's own rotate hook runs as one elementwise XLA pass over q and k before the
kernels (exactly what the reference does) and no term is left to fuse.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from posjax.kernels.terms.base import BATCH_ROW, Built, Call, Term, pad_last, term_for
from posjax.kernels.tile import F32
from posjax.positions.rotary import Rope, rope_inv_freq
from posjax.positions.xpos import XPos


def interleaved_perm(rot: int, dim: int) -> np.ndarray:
    """Columns that put the interleaved pairs (2i, 2i+1) of the first `rot` dims into the
    half-split layout (i, i + rot/2); applied to q AND k it leaves every q.k unchanged."""
    return np.concatenate([np.arange(0, rot, 2), np.arange(1, rot, 2), np.arange(rot, dim)])


@term_for(Rope)
@dataclasses.dataclass(frozen=True)
class Rotation(Term):
    """half: R/2, the number of rotated pairs (the kernels' first two column pieces)."""

    half: int = 0
    key_columns = True

    @classmethod
    def build(cls, scheme, call: Call) -> Built:
        if call.layout == "tpu":
            q, k = scheme.rotate(call.params, call.q, call.k, call.q_pos, call.k_pos)
            return Built(None, {}, q, k)
        q, k = call.q, call.k
        dim = q.shape[-1]
        rot, arrays = cls.frequencies(scheme, dim, q.shape[0], call.k_pos)
        if scheme.interleaved:
            perm = interleaved_perm(rot, dim)
            q, k = q[..., perm], k[..., perm]  # gradient: JAX transposes the gather
        return Built(cls(half=rot // 2), arrays, q, k)

    @staticmethod
    def frequencies(scheme, dim: int, batch: int, k_pos) -> tuple[int, dict]:
        """(rotated dims R, {"inv_freq": [B, R/2]}) (dynamic NTK scales by the length)."""
        rot = scheme.rotary_size(dim)
        inv_freq = jnp.asarray(scheme.inv_freq(dim, k_pos), jnp.float32)
        return rot, {"inv_freq": jnp.broadcast_to(inv_freq, (batch, rot // 2))}

    def inputs(self) -> dict:
        return {"inv_freq": BATCH_ROW, "xpos": BATCH_ROW}

    def widen(self, arrays: dict, dim: int, width):
        # Each rotated half and the pass-through rest are padded separately so the halves
        # stay aligned; padded frequencies are 0 (angle 0: cos 1, sin 0 on zero columns).
        h, hp = self.half, width(self.half)
        segments = [(0, h, hp), (h, h, hp)]
        if dim > 2 * h:
            segments.append((2 * h, dim - 2 * h, width(dim - 2 * h)))
        arrays = {n: pad_last(x, [(0, h, hp)]) for n, x in arrays.items()}
        return dataclasses.replace(self, half=hp), arrays, segments

    def pieces(self, dim: int):
        h = self.half
        out = ((0, h), (h, 2 * h))
        return out + (((2 * h, dim),) if 2 * h < dim else ())

    def load(self, loaded: tuple, pos, r, side: int):
        cos, sin = rope_trig(pos, r, side)
        a, b = loaded[0].astype(F32), loaded[1].astype(F32)
        dtype = loaded[0].dtype
        ra = (a * cos - b * sin).astype(dtype)
        rb = (b * cos + a * sin).astype(dtype)
        return (ra, rb) + tuple(loaded[2:]), (cos, sin)

    def unrotate(self, grads: tuple, ctx) -> tuple:
        # The rotation is orthogonal per pair (xPos: scaled), so its transpose turns by the
        # inverse angle with the same scale.
        cos, sin = ctx
        ga, gb = grads[0], grads[1]
        return (ga * cos + gb * sin, gb * cos - ga * sin) + tuple(grads[2:])


@term_for(XPos)
@dataclasses.dataclass(frozen=True)
class XposRotation(Rotation):
    """RoPE on all dims with the per-pair scale zeta**(+-pos/scale_base) (xpos_scale): the
    kernels multiply cos / sin by exp(+-pos * log(zeta) / scale_base)."""

    @staticmethod
    def frequencies(scheme, dim: int, batch: int, k_pos) -> tuple[int, dict]:
        zeta = (np.arange(0, dim, 2) + scheme.gamma * dim) / ((1 + scheme.gamma) * dim)
        log_zeta = jnp.asarray(np.log(zeta) / scheme.scale_base, jnp.float32)
        rows = (batch, dim // 2)
        return dim, {"inv_freq": jnp.broadcast_to(rope_inv_freq(dim, scheme.base), rows),
                     "xpos": jnp.broadcast_to(log_zeta, rows)}


def rope_trig(pos: jax.Array, r, side: int) -> tuple[jax.Array, jax.Array]:
    """cos, sin [n, R/2] float32 of the angles pos * inv_freq (float32, as rope_angles);
    pos is an [n, 1] column; with an "xpos" input both are scaled by exp(side * pos *
    log(zeta) / scale_base) (side +1 for queries, -1 for keys)."""
    posf = pos.astype(F32)
    angles = posf * r["inv_freq"][...].astype(F32)[None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    if "xpos" in r:
        scale = jnp.exp((side * posf) * r["xpos"][...].astype(F32)[None, :])
        cos, sin = cos * scale, sin * scale
    return cos, sin

