"""Per-scheme position math as it runs INSIDE the flash attention kernel, on one tile.

`schemes.py` turns a bound scheme and its params into a static `Fused` description plus a few
small arrays (O(L) or O(table) memory); the kernels (`flash.py`) call the functions below with
the positions of the current (query block, key block) tile, so no [Lq, Lk] array ever exists
outside a tile.

  kind    what the kernel does on a tile                                  small arrays
  none    plain q.k                                                       -
  rope    rotate the q and k tiles (half-split pairing; the wrapper       inv_freq [B, R/2]
          permutes interleaved dims of q and k identically, which leaves  (xPos: + log(zeta)
          q.k unchanged), then q.k; xPos also scales each pair              / scale_base)
  alibi   bias -slope*|i-j| (or -slope*max(i-j, 0))                       slopes [H, 1]
  kerple  bias -r1*log1p(r2*|i-j|) or -r1*|i-j|**r2                       r1, r2 [H, 2]
  t5      bias table[bucket(j-i), h]: buckets computed in-kernel with     table [H, NBp]
          `t5_bucket`, then a select per bucket present in the tile
  table   Shaw/NEZHA: logit term q_i . a^K_{idx}, value term              tables [Rp, D]
          sum_j p_ij a^V_{idx}, idx = clip(j-i, -K, K) + K
  deberta c2p q_i . Kr_h[idx] and p2c k_j . Qr_h[idx'], log buckets          [H, Rp, D] each
          computed in-kernel (posjax.positions.deberta.deberta_bucket)
  fox     bias c_i - c_j (key at or before the query, else c_j - c_i),   c [B, H, L] (an
          c the forget-gate sums FoX's `prepare` made (tokens.py)          input, not small)

(Shapes of the 'flat' layout; the 'tpu' layout of layout.py folds tables into (8, D) tiles and
keeps hp in SMEM, and dispatch.py rotates q/k for rope BEFORE the kernel there, so the kernel
sees kind 'none'.)

Gathers are written as loops over the bins (buckets, clipped distances) that actually occur in
the tile: `lo..hi` come from the tile's positions, so a key block entirely beyond +-K of the
queries costs ONE bin (the collapse to r_{+-K}), and only tiles near the diagonal pay for up
to ~block_q + block_k bins. Everything is plain jnp arithmetic, selects, row loads and 2-D
tiles (per-query values [n, 1], per-key values [1, n], no 1-D vectors), which both the Triton
and the Mosaic lowering accept (no vector gather; tests/kernels/test_lowering.py, and
test_lowering_tpu.py, which also compiles them with libtpu).

Numerics follow posjax.attention.reference.reference_attention: rotation and angles in float32 with the
rotated q/k cast back to the input dtype; raw logits q.k in the input dtype accumulated in
float32; tables cast to q's dtype for the logit term and float32 for the value term.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from posjax.positions.deberta import deberta_bucket
from posjax.positions.t5 import t5_bucket

F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class Fused:
    """Static description of the fused position scheme (hashable: a jit/custom_vjp static)."""

    kind: str = "none"  # none | rope | alibi | kerple | t5 | table | deberta | fox
    scale: float = 1.0  # multiplier of the raw logits (scheme.logit_scale(D))
    half: int = 0  # rope: R/2, the number of rotated pairs
    # rope: the scheme pairs dims (2i, 2i+1); dispatch permutes q and k into the half-split
    # pairing the kernel rotates (and clears this flag), which leaves every q.k unchanged.
    interleaved: bool = False
    symmetric: bool = True  # alibi
    variant: str = "log"  # kerple
    bidirectional: bool = True  # t5
    num_buckets: int = 32  # t5
    max_distance: int = 128  # t5
    max_rel: int = 0  # table: K, the clipping distance
    bucket_size: int = 256  # deberta
    max_position: int = 512  # deberta
    span: int = 0  # deberta: rows of each position table are 2 * span
    c2p: bool = False  # deberta
    p2c: bool = False  # deberta
    learn_tables: bool = False  # table: Shaw (True) has gradients, NEZHA (False) is fixed
    shared_table: bool = False  # table: one table for keys and values (NEZHA)

    @property
    def has_hp(self) -> bool:
        """Per-head parameter vector input (slopes, r1/r2, T5 column)."""
        return self.kind in ("alibi", "kerple", "t5")

    @property
    def learns_hp(self) -> bool:
        return self.kind in ("kerple", "t5")


# -- loading q / k tiles (rotated for rope) ------------------------------------------------


def pieces(fused: Fused, dim: int) -> tuple[tuple[int, int], ...]:
    """Static column ranges the kernel works with: rope splits D into the two halves of the
    rotated dims (+ the pass-through rest); every other kind uses D whole."""
    if fused.kind != "rope":
        return ((0, dim),)
    h = fused.half
    out = ((0, h), (h, 2 * h))
    return out + (((2 * h, dim),) if 2 * h < dim else ())


def rope_trig(pos: jax.Array, r, side: int) -> tuple[jax.Array, jax.Array]:
    """cos, sin [n, R/2] float32 of the angles pos * inv_freq (float32, as rope_angles);
    pos is an [n, 1] column.

    xPos (an "xpos" input, log(zeta)/scale_base per pair) also scales both by
    zeta**(+pos/scale_base) for queries (side=+1) and zeta**(-pos/scale_base) for keys
    (side=-1), as `xpos_scale`; the scaled rotation stays linear, so `unrotate` with the same
    (cos, sin) is still its transpose.
    """
    posf = pos.astype(F32)
    angles = posf * r["inv_freq"][...].astype(F32)[None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    if "xpos" in r:
        scale = jnp.exp((side * posf) * r["xpos"][...].astype(F32)[None, :])
        cos, sin = cos * scale, sin * scale
    return cos, sin


def load_tile(fused: Fused, ref, rows, pos, r, side: int):
    """Load rows of a [L, D] ref as pieces (rotated for rope), in the input dtype.

    pos: [n, 1] column of the rows' positions (used by rope only; None otherwise).
    side: +1 for queries, -1 for keys (only xPos cares). Returns (pieces, trig); trig is
    (cos, sin) for rope (to un-rotate gradients), else None.
    """
    dim = ref.shape[-1]
    cols = pieces(fused, dim)
    loaded = [ref[rows, pl.ds(a, b - a)] for a, b in cols]
    if fused.kind != "rope":
        return tuple(loaded), None
    cos, sin = rope_trig(pos, r, side)
    a, b = loaded[0].astype(F32), loaded[1].astype(F32)
    dtype = loaded[0].dtype
    ra = (a * cos - b * sin).astype(dtype)
    rb = (b * cos + a * sin).astype(dtype)
    return (ra, rb) + tuple(loaded[2:]), (cos, sin)


def unrotate(grads, trig):
    """Gradients w.r.t. rotated pieces -> gradients w.r.t. the unrotated pieces (transpose of
    the rotation: the rotation is orthogonal per pair, so apply the inverse angle)."""
    if trig is None:
        return grads
    cos, sin = trig
    ga, gb = grads[0], grads[1]
    return (ga * cos + gb * sin, gb * cos - ga * sin) + tuple(grads[2:])


def dot_nt(a: jax.Array, b: jax.Array) -> jax.Array:
    """a [m, d] . b [n, d]^T -> [m, n] float32 (input dtype operands, f32 accumulation)."""
    return lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=F32)


def dot_nn(a: jax.Array, b: jax.Array) -> jax.Array:
    """a [m, k] . b [k, n] -> [m, n] float32."""
    return lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=F32)


def dot_tn(a: jax.Array, b: jax.Array) -> jax.Array:
    """a [k, m]^T . b [k, n] -> [m, n] float32."""
    return lax.dot_general(a, b, (((0,), (0,)), ((), ())), preferred_element_type=F32)


def raw_logits(q_pieces, k_pieces) -> jax.Array:
    """q.k [bq, bk] float32 as a sum over the column pieces."""
    out = dot_nt(q_pieces[0], k_pieces[0])
    for a, b in zip(q_pieces[1:], k_pieces[1:]):
        out = out + dot_nt(a, b)
    return out


# -- small helpers -------------------------------------------------------------------------


# Reductions of a whole 2-D tile to a scalar are written as ONE reduction over both axes: the
# Triton lowering splits it into one axis at a time, Mosaic reduces the 2-D vector and
# extracts the scalar (no 1-D intermediate vectors, whose TPU layouts are the fragile ones).
# Row reductions keep their dim ([n, 1] columns) for the same reason.


def total(x: jax.Array) -> jax.Array:
    """Sum of a 2-D tile as a scalar."""
    return jnp.sum(x)


def tile_min_max(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Scalar min and max of a 2-D int tile."""
    return jnp.min(x), jnp.max(x)


def head_scalar(hp_ref, i: int | jax.Array) -> jax.Array:
    """Entry i of this head's parameter vector, a float32 scalar (broadcasts on a tile).
    hp_ref: the head's [P] block ('flat') or a HeadRow ('tpu')."""
    return hp_ref[i].astype(F32)


class HeadRow:
    """Row `head` of a whole [H, P] ref, indexed like a [P] ref ('tpu' layout: the array sits
    in SMEM because Mosaic loads scalars from SMEM only). The head index is read once with
    pl.program_id at the top of the kernel (interpret mode cannot evaluate program_id inside
    loop bodies)."""

    def __init__(self, ref, head):
        self.ref, self.head = ref, head
        self.shape, self.ndim = ref.shape[1:], 1

    def __getitem__(self, i):
        return self.ref[self.head, i]


def add_at(vec: jax.Array, i, value) -> jax.Array:
    """vec [1, P] with `value` added at index i (i may be traced): a select, no scatter."""
    iota = lax.broadcasted_iota(jnp.int32, vec.shape, vec.ndim - 1)
    return vec + jnp.where(iota == i, value, 0.0)


def distance(qpos: jax.Array, kpos: jax.Array) -> jax.Array:
    """Signed key minus query position j - i, [bq, bk] int32 (qpos [bq, 1], kpos [1, bk])."""
    return kpos.astype(jnp.int32) - qpos.astype(jnp.int32)


# -- bias kinds ----------------------------------------------------------------------------


def bias(fused: Fused, qpos, kpos, hp_ref) -> Optional[jax.Array]:
    """The scheme's additive bias on the scaled logits, [bq, bk] float32 (None if no bias)."""
    if fused.kind == "alibi":
        rel = distance(qpos, kpos)
        dist = jnp.abs(rel) if fused.symmetric else jnp.maximum(-rel, 0)
        return -head_scalar(hp_ref, 0) * dist.astype(F32)
    if fused.kind == "kerple":
        dist = jnp.abs(distance(qpos, kpos)).astype(F32)
        r1, r2 = head_scalar(hp_ref, 0), head_scalar(hp_ref, 1)
        if fused.variant == "log":
            return -r1 * jnp.log1p(r2 * dist)
        return -r1 * _power(dist, r2)
    if fused.kind == "t5":
        bucket = _t5_bucket(fused, qpos, kpos)
        lo, hi = tile_min_max(bucket)

        def body(b, acc):
            return acc + jnp.where(bucket == b, head_scalar(hp_ref, b), 0.0)

        return lax.fori_loop(lo, hi + 1, body, jnp.zeros(bucket.shape, F32))
    return None


def _power(dist, r2):
    """|i-j| ** r2 with 0 at distance 0 (exp/log form: no pow op needed)."""
    safe = jnp.where(dist > 0, dist, 1.0)
    return jnp.where(dist > 0, jnp.exp(r2 * jnp.log(safe)), 0.0)


def _t5_bucket(fused: Fused, qpos, kpos):
    return t5_bucket(distance(qpos, kpos), bidirectional=fused.bidirectional,
                     num_buckets=fused.num_buckets, max_distance=fused.max_distance)


def bias_param_grads(fused: Fused, dbias, qpos, kpos, hp_ref, dhp: jax.Array) -> jax.Array:
    """dhp [1, P] plus d loss / d (per-head params) of one tile.

    dbias [bq, bk] float32 is the gradient w.r.t. the bias entries (zero on masked pairs).
    Accumulated in registers (a loop carry) and written once per program: a read-modify-write
    of an output ref would need a barrier between the threads of a Triton program.
    """
    if fused.kind == "kerple":
        dist = jnp.abs(distance(qpos, kpos)).astype(F32)
        r1, r2 = head_scalar(hp_ref, 0), head_scalar(hp_ref, 1)
        if fused.variant == "log":
            d_r1 = -jnp.log1p(r2 * dist)
            d_r2 = -r1 * dist / (1.0 + r2 * dist)
        else:
            powered = _power(dist, r2)
            d_r1 = -powered
            d_r2 = -r1 * powered * jnp.log(jnp.where(dist > 0, dist, 1.0))
        return add_at(add_at(dhp, 0, total(dbias * d_r1)), 1, total(dbias * d_r2))
    if fused.kind == "t5":
        bucket = _t5_bucket(fused, qpos, kpos)
        lo, hi = tile_min_max(bucket)

        def body(b, acc):
            return add_at(acc, b, total(jnp.where(bucket == b, dbias, 0.0)))

        return lax.fori_loop(lo, hi + 1, body, dhp)
    return dhp


# -- Shaw / NEZHA tables -------------------------------------------------------------------


def table_index(fused: Fused, qpos, kpos):
    """Row clip(j - i, -K, K) + K of every pair, and the range of rows present in the tile."""
    k = fused.max_rel
    idx = jnp.clip(distance(qpos, kpos), -k, k) + k
    lo, hi = tile_min_max(idx)
    return idx, lo, hi


def _row(table_ref, r) -> jax.Array:
    """Row r of a table as [1, D] float32: [Rp, D] ('flat': a one-row load) or [Rp/8, 8, D]
    ('tpu': load the (8, D) tile r // 8 by its untiled leading index, which Mosaic accepts
    at any dynamic value, then pick sublane r % 8 with a select and a sublane sum; a
    dynamic one-row load would need an offset provably a multiple of 8)."""
    if table_ref.ndim == 3:
        # lax.div / lax.rem (r >= 0): jnp's floor division would lower through `sign`.
        tile = table_ref[lax.div(r, 8)].astype(F32)
        pick = lax.broadcasted_iota(jnp.int32, tile.shape, 0) == lax.rem(r, 8)
        return jnp.sum(jnp.where(pick, tile, 0.0), axis=0, keepdims=True)
    return table_ref[pl.ds(r, 1), :].astype(F32)


def gather_rows(src: jax.Array, table_ref, idx, lo, hi, cast_to=None) -> jax.Array:
    """out[i, j] = src_i . table[idx_ij], [n, m] float32 (src [n, D], idx [n, m]; DeBERTa's
    p2c passes key rows and the key-major index, and transposes the result).

    Per bin r present in the tile: one matrix-vector product src @ table[r] and a select.
    `cast_to` rounds the table row to the input dtype first (the reference's q @ table^T
    runs in the input dtype).
    """
    src32 = src.astype(F32)

    def body(r, acc):
        row = _row(table_ref, r)
        if cast_to is not None:
            row = row.astype(cast_to)
        col = jnp.sum(src32 * row.astype(F32), axis=1, keepdims=True)  # [n, 1]
        return acc + jnp.where(idx == r, col, 0.0)

    return lax.fori_loop(lo, hi + 1, body, jnp.zeros(idx.shape, F32))


def scatter_rows(weights: jax.Array, table_ref, idx, lo, hi, dim: int) -> jax.Array:
    """out_i = sum_j weights_ij table[idx_ij], [bq, D] float32: bin the weights per row r,
    then add (bin total) * table[r]. Linear in `weights` (valid for unnormalized p)."""

    def body(r, acc):
        w = jnp.sum(jnp.where(idx == r, weights, 0.0), axis=1, keepdims=True)  # [bq, 1]
        return acc + w * _row(table_ref, r).astype(F32)

    return lax.fori_loop(lo, hi + 1, body, jnp.zeros((idx.shape[0], dim), F32))


def table_grads(draw, probs, q, do, idx, lo, hi, dtabk, dtabv):
    """(dtabk, dtabv) [Rp, D] plus the table gradients of one tile (Shaw):
    dA^K[r] += sum_i (sum_{j: idx=r} draw_ij) q_i,  dA^V[r] += sum_i (sum_{j: idx=r} p_ij) dO_i.
    Loop carries, written once per program (see bias_param_grads)."""
    q32, do32 = q.astype(F32), do.astype(F32)
    rows = lax.broadcasted_iota(jnp.int32, dtabk.shape, 0)

    def body(r, carry):
        gk, gv = carry
        wk = jnp.sum(jnp.where(idx == r, draw, 0.0), axis=1, keepdims=True)  # [bq, 1]
        wv = jnp.sum(jnp.where(idx == r, probs, 0.0), axis=1, keepdims=True)
        gk = gk + jnp.where(rows == r, jnp.sum(wk * q32, axis=0, keepdims=True), 0.0)
        gv = gv + jnp.where(rows == r, jnp.sum(wv * do32, axis=0, keepdims=True), 0.0)
        return gk, gv

    return lax.fori_loop(lo, hi + 1, body, (dtabk, dtabv))


# -- DeBERTa (c2p / p2c with per-head projected tables) --------------------------------------


def deberta_index(fused: Fused, qpos, kpos, p2c: bool):
    """Table row of every pair and the tile's row range, as posjax.positions.deberta:
    c2p clip(bucket(i - j) + span, 0, 2*span-1), p2c clip(-bucket(j - i) + span, ...)."""
    rel = qpos.astype(jnp.int32) - kpos.astype(jnp.int32)
    span = fused.span
    buckets = dict(bucket_size=fused.bucket_size, max_position=fused.max_position)
    bucket = -deberta_bucket(-rel, **buckets) if p2c else deberta_bucket(rel, **buckets)
    idx = jnp.clip(bucket + span, 0, 2 * span - 1)
    lo, hi = tile_min_max(idx)
    return idx, lo, hi


def table_grad(weights, src, idx, lo, hi, acc):
    """acc [Rp, D] plus d table: acc[r] += sum_n (sum_m weights_nm where idx_nm == r) src_n
    (weights, idx [n, m]; src [n, D]: query rows for c2p, key rows with the key-major
    weights / index for p2c)."""
    src32 = src.astype(F32)
    rows = lax.broadcasted_iota(jnp.int32, acc.shape, 0)

    def body(r, g):
        w = jnp.sum(jnp.where(idx == r, weights, 0.0), axis=1, keepdims=True)  # [n, 1]
        return g + jnp.where(rows == r, jnp.sum(w * src32, axis=0, keepdims=True), 0.0)

    return lax.fori_loop(lo, hi + 1, body, acc)
