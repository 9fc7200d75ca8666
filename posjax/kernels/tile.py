"""Tile math shared by the flash attention kernels and the fused position terms (terms/):
matrix products of q / k / v tiles, scalar reductions, per-head scalars, and the gathers and
scatters of table rows by the bins (buckets, clipped distances) present in a tile.

Gathers are written as loops over the bins that actually occur in the tile: `lo..hi` come from
the tile's positions, so a key block entirely beyond +-K of the queries costs ONE bin (the
collapse to r_{+-K}), and only tiles near the diagonal pay for up to ~block_q + block_k bins.
Everything is plain jnp arithmetic, selects, row loads and 2-D tiles (per-query values
[n, 1], per-key values [1, n], no 1-D vectors), which both the Triton and the Mosaic lowering
accept (no vector gather; tests/kernels/test_lowering.py, and test_lowering_tpu.py, which also
compiles them with libtpu).

Numerics follow posjax.attention.reference.reference_attention: raw logits q.k in the input
dtype accumulated in float32; tables cast to q's dtype for the logit term and float32 for the
value term.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

F32 = jnp.float32


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


# -- table rows ----------------------------------------------------------------------


def table_row(table_ref, r) -> jax.Array:
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
        row = table_row(table_ref, r)
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
        return acc + w * table_row(table_ref, r).astype(F32)

    return lax.fori_loop(lo, hi + 1, body, jnp.zeros((idx.shape[0], dim), F32))


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


# -- per-row values in either layout (layout.py) -------------------------------------------


def col(ref, rows) -> jax.Array:
    """[n, 1] column of a per-query ref [L, W] (also "kposc", lse, delta)."""
    x = ref[rows, :]
    return x if x.shape[1] == 1 else x[:, :1]


def row(ref, cols) -> jax.Array:
    """[1, n] row of a per-key ref [S, L] (its first sublane)."""
    return ref[pl.ds(0, 1), cols]


def store_col(ref, col) -> None:
    """Write a [n, 1] column into a [n, W] output block (broadcast over the lanes)."""
    ref[...] = jnp.broadcast_to(col, ref.shape).astype(ref.dtype)


def tile_vjp(formula, args, cotangent):
    """Gradients of sum(cotangent * formula(*args)) w.r.t. each of `args`, every one a full
    tile (broadcast per-head scalars or per-token values to the tile first): JAX derives them
    from the formula itself, and with tile-shaped arguments the derivative is elementwise
    (no broadcast to transpose into 1-D reductions, which Mosaic lays out poorly); the
    caller reduces each to its parameter's shape (`total`, row or column sums)."""
    _, pull = jax.vjp(formula, *args)
    return pull(cotangent)
