"""The fused-term contract: what one position scheme contributes to the flash attention
kernels, and the registry from scheme classes to terms.

A term is a frozen dataclass (hashable: it travels in layout.Static, a jit static) whose
fields are the scheme's static choices (ALiBi's direction, KERPLE's variant, T5's buckets).
Its classmethod `build` turns a bound scheme and its params into the term and the small arrays
the kernels read; the methods below are what the kernels call on every tile. Every hook has a
neutral default, so a term fills only what it adds:

  before the kernels (dispatch.py, plain JAX: gradients of this step come from JAX)
    build(scheme, call) -> Built     the term (or None: nothing left to fuse), its arrays by
                                     name, and q / k (RoPE's TPU path rotates them here)
    inputs() -> {name: placement}    how each array is laid out, blocked, padded and split
                                     (the placements below; layout.py, dispatch.py)
    grads() -> {name: pass}          the arrays the kernels differentiate, and in which pass
                                     ('dq' or 'dkv'); the others get zero gradients
    widen(arrays, dim, width)        pad head-dim columns to Triton widths (tables; RoPE its
                                     rotated halves)
  inside the kernels (flash.py), per [bq, bk] tile `t` (positions, rows, q / k pieces)
    pieces(dim), load, unrotate      column pieces of q / k and how a tile is loaded (RoPE)
    logits(r, t, s) -> (s, ctx)      content terms added to the raw logits q.k, before the
                                     logit scale (Shaw / NEZHA, DeBERTa); ctx is passed back
    bias(r, t)                       the additive bias after the scale (ALiBi, KERPLE, T5, FoX)
    values(r, t, ctx, p, dim)        value terms of the forward's p @ V (Shaw / NEZHA)
    dp(r, t, ctx, do)                their share of dP = dO . V^T
    dq / dk(r, t, ctx, draw, acc)    content terms' share of dq / dk
    grad_step(pass, r, t, ctx, g)    this tile's share of the gradients `grads()` names for
                                     the pass (a dict of loop carries by name, written once
                                     per program); called only in the passes `grads()` names

Each bias formula is the positions module's own (posjax.positions.bias.alibi_tile,
kerple_tile, fox.forget_tile, t5.t5_bucket, deberta.deberta_bucket), called on the tile, and
where a parameter gradient is the derivative of a formula, JAX takes it (tile.tile_vjp).

A new fused scheme is one module here with one `@term_for(SchemeClass)` class, imported in
terms/__init__.py, plus its entry in cases.py: flash, vjp, layout and dispatch are unchanged
(tests/kernels/test_terms.py registers a toy term that way).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple, Optional

import jax
import jax.numpy as jnp

# Placements of a term's arrays: layout.py blocks them, dispatch.py pads, folds and splits
# them across shards, vjp.py turns their gradients into kernel outputs and reductions.
HEAD_SCALARS = "head_scalars"  # [H, P] per-head values: a [P] block per head ('tpu': SMEM)
TABLE = "table"  # [Rp, D] one table for every head, read whole ('tpu': [Rp/8, 8, D])
HEAD_TABLE = "head_table"  # [H, Rp, D] a table per head ('tpu': [H, Rp/8, 8, D])
QUERY_TOKENS = "query_tokens"  # [B, H, Lq] per query token: [n, 1] columns in the kernels
KEY_TOKENS = "key_tokens"  # [B, H, Lk] per key token: [1, n] rows in the kernels
BATCH_ROW = "batch_row"  # [B, R] per example, never differentiated (RoPE frequencies)
PLACEMENTS = (HEAD_SCALARS, TABLE, HEAD_TABLE, QUERY_TOKENS, KEY_TOKENS, BATCH_ROW)
# Placements whose gradients are sums over tiles (per-program partials summed in vjp.py).
SUMMED = (HEAD_SCALARS, TABLE, HEAD_TABLE)
TABLES = (TABLE, HEAD_TABLE)


class Call(NamedTuple):
    """What a term's `build` sees of a flash_attention call: the bound scheme's params, the
    unpadded q / k / v [B, L, H, D] (after RoPE on values), int32 positions [B, L], the
    padded lengths and the block layout ('flat' | 'tpu')."""

    params: Any
    q: jax.Array
    k: jax.Array
    v: jax.Array
    q_pos: jax.Array
    k_pos: jax.Array
    len_q: int
    len_k: int
    layout: str


class Built(NamedTuple):
    """A term's `build`: the term (None: the kernels compute plain attention), its arrays by
    name (see `Term.inputs`) and q, k as the kernels should see them."""

    term: Optional["Term"]
    arrays: dict
    q: jax.Array
    k: jax.Array


@dataclasses.dataclass
class Tile:
    """One (query block, key block) tile as the hooks see it: positions qpos [bq, 1] and kpos
    [1, bk] (int), the rows of the per-token refs (qsl, ksl), the loaded q / k pieces; in the
    backward pass also p, dO and the logits' gradients before (dlog: what the bias sees) and
    after (draw) the logit scale, all [bq, bk] float32 and zero on masked pairs."""

    qpos: jax.Array
    kpos: jax.Array
    qsl: Any
    ksl: Any
    q: tuple
    k: tuple
    p: Optional[jax.Array] = None
    do: Optional[jax.Array] = None
    dlog: Optional[jax.Array] = None
    draw: Optional[jax.Array] = None


# Exact scheme class -> its term class (subclasses may change the math: never assumed).
REGISTRY: dict[type, type["Term"]] = {}


def term_for(*scheme_classes):
    """Class decorator: register the term as the kernels' computation of these schemes."""

    def register(term_cls):
        for scheme_cls in scheme_classes:
            if scheme_cls in REGISTRY:
                raise ValueError(f"{scheme_cls.__name__} already has a fused term "
                                 f"({REGISTRY[scheme_cls].__name__})")
            REGISTRY[scheme_cls] = term_cls
        return term_cls

    return register


def term_class(scheme) -> Optional[type["Term"]]:
    """The registered term class of a scheme's exact class, or None."""
    return REGISTRY.get(type(scheme))


def pad_last(x, segments):
    """Concatenate x[..., a:a+n] zero-padded to m columns for each (a, n, m)."""
    parts = []
    for a, n, m in segments:
        part = x[..., a:a + n]
        if m > n:
            part = jnp.pad(part, [(0, 0)] * (x.ndim - 1) + [(0, m - n)])
        parts.append(part)
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(n - 1, 0).bit_length()


@dataclasses.dataclass(frozen=True)
class Term:
    """One fused scheme's share of the kernels (see the module docstring); the defaults add
    nothing."""

    # The kernels need key positions as columns (rotating key tiles: RoPE).
    key_columns: ClassVar[bool] = False

    @classmethod
    def build(cls, scheme, call: Call) -> Built:
        raise NotImplementedError

    def inputs(self) -> dict:
        return {}

    def grads(self) -> dict:
        return {}

    def widen(self, arrays: dict, dim: int, width):
        """(term, arrays, column segments of q / k or None) with head-dim columns padded to
        width(n) (Triton tile widths): the tables' columns follow q's."""
        segments = [(0, dim, width(dim))]
        places = self.inputs()
        arrays = {n: pad_last(x, segments) if places[n] in TABLES else x
                  for n, x in arrays.items()}
        return self, arrays, None

    # -- inside the kernels ---------------------------------------------------------------

    def pieces(self, dim: int):
        """Static column ranges of q / k the kernels work with (None: D whole)."""
        return None

    def load(self, loaded: tuple, pos, r, side: int):
        """(pieces, ctx) of loaded q (side +1) or k (side -1) rows; pos their [n, 1] column
        of positions (None unless `key_columns` or a query tile)."""
        return loaded, None

    def unrotate(self, grads: tuple, ctx) -> tuple:
        """Gradients w.r.t. loaded pieces -> w.r.t. the stored pieces (`load`'s transpose)."""
        return grads

    def logits(self, r, t: Tile, s):
        return s, None

    def bias(self, r, t: Tile):
        return None

    def values(self, r, t: Tile, ctx, p, dim: int):
        return None

    def dp(self, r, t: Tile, ctx, do):
        return None

    def dq(self, r, t: Tile, ctx, draw, dq: tuple) -> tuple:
        return dq

    def dk(self, r, t: Tile, ctx, draw, dk: tuple) -> tuple:
        return dk

    def grad_step(self, pass_: str, r, t: Tile, ctx, grads: dict) -> dict:
        return grads
