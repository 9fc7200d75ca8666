"""Block layouts of the flash attention kernels and the pallas_call plumbing (flash.py holds
the kernels).

Layouts (`Static.layout`, chosen per backend by dispatch.py; the kernel bodies are the same):

  array                        'flat' (Triton, interpret)   'tpu' (Mosaic)
  per-query (qpos, qseg,       [B, Lq, 1]                   [B, Lq, 128] (lane-broadcast)
    factor; kposc: key
    positions as columns)
  per-key (kpos, kseg, kvalid) [B, 1, Lk]                   [B, 8, Lk] (sublane-broadcast)
  logsumexp, delta             [B, H, Lq, 1]                [B, H, Lq, 128]
  a term's arrays, by placement (terms/base.py):
    query_tokens (FoX's cq)    [B, H, Lq, 1]                [B, H, Lq, 128]
    key_tokens (FoX's ck)      [B, H, 1, Lk]                [B, H, 8, Lk]
    head_scalars (hp)          [H, P], (P,) block per head  [H, P] whole, in SMEM
    table (Shaw/NEZHA)         [Rp, D]                      [Rp/8, 8, D] (row r: tile r//8)
    head_table (DeBERTa)       [H, Rp, D]                   [H, Rp/8, 8, D]
    batch_row (RoPE inv_freq)  [B, R/2]                     (RoPE is rotated before)

Mosaic wants the last two dims of every block divisible by (8, 128) or equal to the array's;
the 'tpu' column is the convention of jax's own TPU flash / splash attention (row statistics
and query ids broadcast over 128 lanes, key ids over 8 sublanes), and blocks there are
multiples of 128. In-kernel every per-query value is a [n, 1] column and every per-key value a
[1, n] row (`tile.col`, `tile.row`), so the tile math is identical in both layouts. A table row is
read as the (8, D) tile r // 8 (a dynamic index on the untiled leading dim) and a sublane
select, and per-head scalars come from SMEM: Mosaic has no vector gather, cannot prove a
dynamic sublane offset aligned, and loads scalars from SMEM only.

What was checked for 'tpu': libtpu's compilation (Mosaic passes, VMEM allocation, XLA TPU)
for a described TPU v4 / v5e / v5p / v6e / TPU7x on a CPU machine
(tests/kernels/test_lowering_tpu.py, bench/tpu_compile.py) and the same layout in interpret
mode against the reference (tests/kernels/test_layout.py); not run on TPU hardware. The
'tpu' layout never sees a RoPE term (terms/rope.py rotates q and k in XLA first: the
rotation's half slices sit at lane offsets that are not multiples of 128).

VMEM: in the 'flat' layout a program reads the other sequence whole and walks it with a
fori_loop (Triton loads each tile from global memory as it goes). On TPU a BlockSpec'd input
is copied into VMEM whole, so the 'tpu' layout streams the other sequence instead, one block
per step of a 4th grid axis declared 'arbitrary' (the first three are 'parallel'), with the
loop carries (m, l, accumulators, parameter-gradient partials) in VMEM scratch, as jax's TPU
flash attention does: VMEM per program is O(block), independent of the sequence length.
The tile step (flash.py: `step` in each kernel, `_tile`) is the same code in both; only the
driver (`_loop`, `_at_end`, `_inner`) differs. A local layer's band (band.py) shortens that
axis to the band's width, and its index maps fetch the band's blocks.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from posjax.kernels import band as bandlib
from posjax.kernels.terms.base import (BATCH_ROW, HEAD_SCALARS, HEAD_TABLE, KEY_TOKENS,
                                       QUERY_TOKENS, TABLE)
from posjax.kernels.tile import F32, HeadRow

# Per-query inputs ([B, Lq, W]) and per-key inputs ([B, S, Lk]); "kposc" holds the key
# positions as columns ([B, Lk, W]: rotating a key tile needs them down the sublanes);
# everything else is per (b, h) or global. Names are the keys of the `aux` dict and of the
# kernels' ref dicts.
_Q_ROWS = ("qpos", "qseg", "factor")
_K_ROWS = ("kpos", "kseg", "kvalid")
_K_COLS = ("kposc",)
LAYOUTS = ("flat", "tpu")


@dataclasses.dataclass(frozen=True)
class Static:
    """Everything about a call that is fixed at trace time (hashable)."""

    terms: tuple  # the scheme's fused terms (terms/), () for plain attention
    scale: float  # multiplier of the raw logits (scheme.logit_scale(D))
    block_q: int
    block_k: int
    causal: bool
    interpret: bool
    backend: str  # 'gpu' | 'tpu' | 'cpu' (cpu only with interpret)
    layout: str = "flat"  # 'flat' | 'tpu' (see the module docstring)
    skip_empty_tiles: bool = True  # lax.cond around tiles where no pair may attend (flash._loop)
    window: Optional[int] = None  # a local layer's sliding window (tiles.window_mask)
    band: str = "off"  # walk only the window's band of blocks: 'off' | 'on' | 'checked' (band.py)
    blocks: tuple = ()  # with a band: (query blocks, key blocks) of the whole call
    q_offset: int = 0  # query blocks before this launch (vjp's dq chunks; with a band)

    @property
    def inputs(self) -> dict:
        """{name: placement} of every term's arrays."""
        return {n: p for term in self.terms for n, p in term.inputs().items()}

    def grads(self, pass_: str) -> tuple:
        """Names of the term arrays whose gradients the pass ('dq' | 'dkv') returns, in the
        order of its extra outputs."""
        return tuple(n for term in self.terms for n, p in term.grads().items() if p == pass_)

    def pieces(self, dim: int) -> tuple:
        """Static column ranges of q / k the kernels work with (RoPE: the rotated halves and
        the rest), else D whole."""
        for term in self.terms:
            cols = term.pieces(dim)
            if cols is not None:
                return cols
        return ((0, dim),)

    @property
    def key_columns(self) -> bool:
        """The kernels read key positions as columns ("kposc": rotating key tiles)."""
        return any(term.key_columns for term in self.terms)

    @property
    def lanes(self) -> int:
        """Width W of per-query arrays and row statistics ([.., L, W])."""
        return 128 if self.layout == "tpu" else 1

    @property
    def sublanes(self) -> int:
        """Height S of per-key arrays ([.., S, L])."""
        return 8 if self.layout == "tpu" else 1

    @property
    def streams(self) -> bool:
        """The other sequence arrives block by block on a 4th ('arbitrary') grid axis with the
        loop carries in VMEM scratch ('tpu'), instead of whole, walked by a fori_loop
        ('flat': Triton reads it from global memory as it goes, so whole costs nothing)."""
        return self.layout == "tpu"


def to_layout(st: Static, aux: dict) -> dict:
    """[B, L] per-query / per-key arrays -> the kernel layout (plain JAX, outside the kernel):
    per-query [B, L, W] and per-key [B, S, L] (broadcast copies: O(L) memory)."""
    out = {}
    for name, x in aux.items():
        if name in _Q_ROWS or name in _K_COLS:
            out[name] = jnp.broadcast_to(x[:, :, None], x.shape + (st.lanes,))
        elif name in _K_ROWS:
            out[name] = jnp.broadcast_to(x[:, None, :], (x.shape[0], st.sublanes, x.shape[1]))
        else:
            out[name] = x
    return out


def term_arrays(st: Static, arrays: dict) -> dict:
    """A term's per-token arrays [B, H, L] -> per-query [B, H, Lq, W] / per-key [B, H, S, Lk]
    (inside the custom_vjp: their gradients come back as [B, H, L]); the rest as they are."""
    out = {}
    for name, x in arrays.items():
        place = st.inputs[name]
        if place == QUERY_TOKENS:
            x = jnp.broadcast_to(x[..., None], x.shape + (st.lanes,))
        elif place == KEY_TOKENS:
            x = jnp.broadcast_to(x[:, :, None, :], x.shape[:2] + (st.sublanes,) + x.shape[2:])
        out[name] = x
    return out


# -- specs ---------------------------------------------------------------------------------


# Sequence-indexed inputs: name -> (side, sequence axis, has a head axis after batch).
SEQ = {"q": ("q", 2, True), "do": ("q", 2, True), "k": ("k", 2, True), "v": ("k", 2, True),
        "lse": ("q", 2, True), "delta": ("q", 2, True),
        **{n: ("q", 1, False) for n in _Q_ROWS}, **{n: ("k", 1, False) for n in _K_COLS},
        **{n: ("k", 2, False) for n in _K_ROWS}}
# Per-token term arrays, as laid out by `term_arrays`.
_TOKEN_SEQ = {QUERY_TOKENS: ("q", 2, True), KEY_TOKENS: ("k", 3, True)}


def seq_axis(st: Static, name: str):
    """(side 'q' | 'k', sequence axis, has a head axis after batch) of a sequence-indexed
    input, or None."""
    if name in SEQ:
        return SEQ[name]
    return _TOKEN_SEQ.get(st.inputs.get(name))


def _spec(name: str, arr, st: Static, q_blocked: bool) -> pl.BlockSpec:
    """BlockSpec of one input on a (b, h, block[, inner]) grid; q_blocked: the block axis
    walks queries (forward, dq) else keys (dkv). The other sequence is loaded whole and sliced
    in-kernel ('flat') or streamed one block per step of the inner grid axis ('tpu')."""
    seq = seq_axis(st, name)
    if seq is not None:
        side, axis, has_head = seq
        own = (side == "q") == q_blocked
        size = st.block_q if side == "q" else st.block_k
        if not own and not st.streams:
            size = arr.shape[axis]
        pick = 2 if own else 3  # grid index of the block along `axis` (unused if whole)
        whole = not own and not st.streams
        shape = tuple(None if d == 0 or (d == 1 and has_head) else size if d == axis
                      else arr.shape[d] for d in range(arr.ndim))
        streamed_band = st.streams and not own and st.band == "on"

        def block(g):
            if not streamed_band:
                return g[pick]
            # Step j of the band of own block g[2]: block lo + j, clamped into range (steps
            # past the band's end are skipped in-kernel; flash._loop).
            own_size, other_size, before, after = band_sides(st, q_blocked)
            n_other = arr.shape[axis] // size
            lo, _ = bandlib.block_range(g[2], own_size, other_size, n_other, before, after)
            return jnp.minimum(lo + g[3], n_other - 1)

        def index(*g):
            return tuple(g[0] if d == 0 else g[1] if (d == 1 and has_head)
                         else (0 if whole else block(g)) if d == axis else 0
                         for d in range(arr.ndim))

        return pl.BlockSpec(shape, index)
    place = st.inputs.get(name)
    if place == BATCH_ROW:  # [B, R] ('flat' only: RoPE is rotated before a 'tpu' kernel)
        return pl.BlockSpec((None, arr.shape[-1]), lambda b, h, *_: (b, 0))
    if place == HEAD_SCALARS:  # [H, P]
        if st.layout == "tpu":  # scalars read at dynamic indices: SMEM, whole array
            return pl.BlockSpec(memory_space=pltpu.SMEM)
        return pl.BlockSpec((None, arr.shape[-1]), lambda b, h, *_: (h, 0))
    if place == TABLE:  # [Rp, D] ('flat') or [Rp/8, 8, D] ('tpu')
        return pl.BlockSpec(arr.shape, lambda *_: (0,) * arr.ndim)
    if place == HEAD_TABLE:  # [H, Rp, D] or [H, Rp/8, 8, D]
        return pl.BlockSpec((None,) + arr.shape[1:],
                            lambda b, h, *_: (h,) + (0,) * (arr.ndim - 1))
    raise ValueError(f"no block spec for input {name!r}")


def call(kernel, st: Static, inputs: dict, q_blocked: bool, grid, out_shape, out_specs, name,
          carry=(), sequential_blocks: bool = False):
    """pallas_call on grid (b, h, blocks) [+ the other side's blocks when st.streams];
    `carry`: shapes of the kernel's loop carries (float32), VMEM scratch when streaming;
    `sequential_blocks`: the block axis accumulates into shared output blocks, so it must
    run in order ('arbitrary' on TPU)."""
    names = tuple(inputs)
    arrays = [inputs[n] for n in names]
    specs = [_spec(n, a, st, q_blocked) for n, a in zip(names, arrays)]
    scratch = ()
    if st.streams:
        other = inputs["k" if q_blocked else "q"].shape[2]
        steps = other // (st.block_k if q_blocked else st.block_q)
        if st.band == "on":  # only the band's blocks (band.py)
            own, small, before, after = band_sides(st, q_blocked)
            steps = bandlib.width(grid[2], own, small, steps, before, after)
        grid = tuple(grid) + (steps,)
        scratch = tuple(pltpu.VMEM(shape, F32) for shape in carry)
    return pl.pallas_call(
        functools.partial(kernel, names=names, st=st, n_out=len(out_shape)),
        grid=grid,
        in_specs=specs,
        out_specs=out_specs,
        out_shape=out_shape,
        scratch_shapes=scratch,
        interpret=st.interpret,
        compiler_params=compiler_params(st, sequential_blocks),
        name=name,
    )(*arrays)


def compiler_params(st: Static, sequential_blocks: bool = False):
    if st.interpret:
        return None
    if st.backend == "gpu":
        from jax.experimental.pallas import triton as plgpu

        # 8 warps at every head dim: at head dim 64 with 4 warps the kernels hit the
        # 255-register cap and spill (bench/gpu_compile.py; numbers in bench/gpu_compile_h200.md).
        return plgpu.CompilerParams(num_warps=8, num_stages=2)
    if st.backend == "tpu":
        # (b, h, block) are independent, except in the dq kernel of a scheme with learnable
        # parameters, whose gradients accumulate over the query blocks (vjp._dq_pass);
        # the inner axis walks the other sequence in order, carrying the accumulators.
        block_axis = "arbitrary" if sequential_blocks else "parallel"
        return pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", block_axis, "arbitrary"))
    return None


def band_sides(st: Static, q_blocked: bool):
    """(own block, other block, reach before, reach after) of a pass (band.sides)."""
    return bandlib.sides(st.window, st.causal, q_blocked, st.block_q, st.block_k)


def named_refs(names, refs, st: Static) -> dict:
    """Input refs by name; in the 'tpu' layout a whole [H, P] per-head-scalars ref becomes
    this head's row."""
    r = dict(zip(names, refs))
    if st.layout == "tpu":
        for name, place in st.inputs.items():
            if place == HEAD_SCALARS and name in r:
                r[name] = HeadRow(r[name], pl.program_id(1))
    return r
