"""Block layouts of the flash attention kernels and the pallas_call plumbing (flash.py holds
the kernels).

Layouts (`Static.layout`, chosen per backend by dispatch.py; the kernel bodies are the same):

  array                        'flat' (Triton, interpret)   'tpu' (Mosaic)
  per-query (qpos, qseg,       [B, Lq, 1]                   [B, Lq, 128] (lane-broadcast)
    factor; kposc: key
    positions as columns)
  per-key (kpos, kseg, kvalid) [B, 1, Lk]                   [B, 8, Lk] (sublane-broadcast)
  logsumexp, delta             [B, H, Lq, 1]                [B, H, Lq, 128]
  FoX sums: of queries (cq)    [B, H, Lq, 1]                [B, H, Lq, 128]
            of keys (ck)       [B, H, 1, Lk]                [B, H, 8, Lk]
  hp (per-head scalars)        [H, P], (P,) block per head  [H, P] whole, in SMEM
  Shaw/NEZHA tables            [Rp, D]                      [Rp/8, 8, D] (row r: tile r//8)
  DeBERTa tables               [H, Rp, D]                   [H, Rp/8, 8, D]

Mosaic wants the last two dims of every block divisible by (8, 128) or equal to the array's;
the 'tpu' column is the convention of jax's own TPU flash / splash attention (row statistics
and query ids broadcast over 128 lanes, key ids over 8 sublanes), and blocks there are
multiples of 128. In-kernel every per-query value is a [n, 1] column and every per-key value a
[1, n] row (`col`, `row`), so the tile math is identical in both layouts. A table row is
read as the (8, D) tile r // 8 (a dynamic index on the untiled leading dim) and a sublane
select, and per-head scalars come from SMEM: Mosaic has no vector gather, cannot prove a
dynamic sublane offset aligned, and loads scalars from SMEM only.

What was checked for 'tpu': libtpu's compilation (Mosaic passes, VMEM allocation, XLA TPU)
for a described TPU v4 / v5e / v5p / v6e / TPU7x on a CPU machine
(tests/kernels/test_lowering_tpu.py, bench/tpu_compile.py) and the same layout in interpret
mode against the reference (tests/kernels/test_layout.py); not run on TPU hardware. The
'tpu' layout never sees kind 'rope' (dispatch.py rotates q and k in XLA first: the
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

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from posjax.kernels import band as bandlib
from posjax.kernels import fused as fz
from posjax.kernels.fused import F32, Fused

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

    fused: Fused
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


# -- specs ---------------------------------------------------------------------------------


# Sequence-indexed inputs: name -> (side, sequence axis, has a head axis after batch).
SEQ = {"q": ("q", 2, True), "do": ("q", 2, True), "k": ("k", 2, True), "v": ("k", 2, True),
        "lse": ("q", 2, True), "delta": ("q", 2, True),
        "cq": ("q", 2, True), "ck": ("k", 3, True),  # FoX's sums (tokens.py)
        **{n: ("q", 1, False) for n in _Q_ROWS}, **{n: ("k", 1, False) for n in _K_COLS},
        **{n: ("k", 2, False) for n in _K_ROWS}}


def _spec(name: str, arr, st: Static, q_blocked: bool) -> pl.BlockSpec:
    """BlockSpec of one input on a (b, h, block[, inner]) grid; q_blocked: the block axis
    walks queries (forward, dq) else keys (dkv). The other sequence is loaded whole and sliced
    in-kernel ('flat') or streamed one block per step of the inner grid axis ('tpu')."""
    if name in SEQ:
        side, axis, has_head = SEQ[name]
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
    if name in ("inv_freq", "xpos"):  # [B, R/2] ('flat' only: dispatch rotates for 'tpu')
        return pl.BlockSpec((None, arr.shape[-1]), lambda b, h, *_: (b, 0))
    if name == "hp":  # [H, P]
        if st.layout == "tpu":  # scalars read at dynamic indices: SMEM, whole array
            from jax.experimental.pallas import tpu as pltpu

            return pl.BlockSpec(memory_space=pltpu.SMEM)
        return pl.BlockSpec((None, arr.shape[-1]), lambda b, h, *_: (h, 0))
    if name in ("tabk", "tabv"):  # [Rp, D] ('flat') or [Rp/8, 8, D] ('tpu')
        return pl.BlockSpec(arr.shape, lambda *_: (0,) * arr.ndim)
    if name in ("hk", "hq"):  # [H, Rp, D] or [H, Rp/8, 8, D] per-head tables (DeBERTa)
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
        from jax.experimental.pallas import tpu as pltpu

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
        from jax.experimental.pallas import tpu as pltpu

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


# -- per-row values in either layout -------------------------------------------------------


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


def named_refs(names, refs, st: Static) -> dict:
    """Input refs by name; the 'tpu' layout's whole [H, P] hp ref becomes this head's row."""
    r = dict(zip(names, refs))
    if st.layout == "tpu" and "hp" in r:
        r["hp"] = fz.HeadRow(r["hp"], pl.program_id(1))
    return r
