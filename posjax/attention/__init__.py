"""One attention function, `attend`, that composes a position scheme's hooks, and the choice
of the path that runs it.

Five implementations give the same numbers:
  reference  (reference.py) materializes [B, H, Lq, Lk] float32 logits. It is the readable
             definition of every hook, mask and scale; the others are tested against it.
  lean       (lean.py) the reference on short sequences with the mask built once per forward
             (the encoder passes it to every layer) and applied as one additive term, or not
             at all when every row is one unpadded example. Only on request: on CPU it
             measured slower than the reference, whose masks XLA fuses into the softmax.
  chunked    (chunked.py) query blocks x key blocks with an online softmax in plain JAX,
             memory O(L x block) forward and backward.
  rows       (rows.py) the reference's math one query block at a time against whole key
             rows (a local layer: its band), memory O(block_q x L); 'auto' on CPU for long
             bidirectional inputs, where it measured faster than chunked and the reference.
             Bidirectional attention with no logit term, or a factored one (content_factors;
             any mask, float32) runs there as a compiled flash-attention kernel (native.py),
             which 'auto' takes at any length.
  kernel     Pallas flash attention from posjax.kernels (GPU/TPU; interpret mode on CPU).
The tile math they share (mask value, logits, masks, key counting, log-n factor, value
combining) is posjax.tiling, below both this package and the kernels.

The order of operations (the contract every implementation follows):
  (q_tok, k_tok) = scheme.prepare(q, k, v) per-token arrays, once per forward (FoX)
  (q, k) = scheme.rotate(q, k)             if rotate and no scores (scores gets q, k unrotated)
  v = scheme.rotate_values(v, k_pos)       RoPE on_values=True (the output goes back by q_pos)
  raw = scheme.scores(q, k) if scores else q . k   (input dtype, float32 accumulation)
    or raw = q'.k + q_extra.k_extra  from scheme.content_factors(q, k) (Transformer-XL)
    or raw = scheme.carried_scores(carry, k)  per side of the query (k_pos <= q_pos; and
      k_pos > q_pos unless causal), the carry (each query's state, q at first) passed
      outward from the query across key tiles (PaTH), with the tile's k_tok from
      scheme.carried_keys(k, k_tok) once per key tile, for every query block
  raw += scheme.content_logits(q, k)       raw logit terms, before the scale
  logits = raw * scheme.logit_scale(D) + scheme.bias(q_pos, k_pos) + scheme.token_bias(...)
                                           token_bias reads the arrays `prepare` made once (FoX)
  logits = scheme.map_logits(logits)       all heads of each (query, key) pair at once (DAPE)
  logits += scheme.count_logits(counts)    CoPE: gated key counts (counts.py), gates of logits
  logits *= log(n_keys) / log(logn_length) n_keys = keys this query may attend (after masks)
  logits *= scheme.length_scale(n_keys)    per head and query (SSMax: s_h log n_keys)
  masks: kv_mask, segment_ids (equal ids only), causal (k_pos <= q_pos, by POSITIONS),
         window (a local layer: |q_pos - k_pos| <= window // 2; causal: q_pos - k_pos < window)
  p = float32 softmax; a row with no key to attend gives p = 0, output 0, never NaN
      sinks (learned, per head): exp(sink) joins each row's denominator, with no value
    or p = the sum over the query's sides of scheme.normalize(logits, side mask), keys nearest
      first (stick-breaking; sides: k_pos <= q_pos, and k_pos >= q_pos unless causal)
  out = p @ v + scheme.content_values(p)
  out = scheme.rotate_values(out, q_pos, inverse=True)   RoPE on_values=True; cast to q.dtype

Validation is plain Python on shapes and dtypes, so a bad input raises ConfigError before any
trace or compile (and also works when `attend` is called inside jitted model code).
"""

from __future__ import annotations

import numbers
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from posjax import kernels, schema
from posjax.attention import lean, native
from posjax.attention.chunked import chunked_attention
from posjax.attention.reference import reference_attention
from posjax.attention.rows import rows_attention
from posjax.errors import ConfigError, check
from posjax.positions.base import Scheme
from posjax.tiling.tiles import MASK_VALUE

IMPLEMENTATIONS = schema.ATTENTION  # model.attention's choices, declared in the schema

# 'auto' picks a blocked path above this many keys: at 1024 keys the reference's
# [B, H, L, L] float32 logits are 4 MiB per (batch, head), still cheap; beyond, they grow
# quadratically.
AUTO_CHUNKED_MIN_KEYS = 1024
# For a scheme that carries state from key block to key block (`carries`), chunked's tiles
# beat the reference past this many keys: stick-breaking on CPU at 128 keys 227 vs 261 ms,
# 512 299 vs 960, 1024 478 vs 1,780 (B x L = 8192, 4 heads of 32); at 64, 135 vs 96. CoPE:
# 256 keys 133 vs 210 ms, 128 keys 112 vs 91.
AUTO_CHUNKED_MIN_KEYS_CARRIED = 128

# What to ask for instead when the kernel refuses a scheme (CoPE).
KERNEL_ALTERNATIVES = "'chunked' (O(L x block) memory), 'reference' or 'auto': "

_NO_SCHEME = Scheme()  # no position hooks: plain scaled dot-product attention
_LOGGED: set[str] = set()


def attend(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    scheme: Optional[Scheme] = None,
    params: Any = None,
    q_pos: Optional[jax.Array] = None,
    k_pos: Optional[jax.Array] = None,
    kv_mask: Optional[jax.Array] = None,
    segment_ids: Optional[tuple[jax.Array, jax.Array]] = None,
    causal: bool = False,
    logn_length: Optional[float] = None,
    implementation: str = "auto",
    block_q: int = 128,
    block_k: int = 128,
    shard_axes: Optional[tuple] = None,
    window: Optional[int] = None,
    mask: Optional[lean.LeanMask] = None,
    sinks: Optional[jax.Array] = None,
) -> jax.Array:
    """Multi-head attention with a position scheme's hooks; returns [B, Lq, H, D] in q.dtype.

    q [B, Lq, H, D], k and v [B, Lk, H, D]; q_pos [B, Lq] and k_pos [B, Lk] integer positions
    (default arange; [B, L, 2] (row, column), required, for a scheme with position_dims=2);
    kv_mask [B, Lk] bool, True = real token; segment_ids a pair ([B, Lq], [B, Lk]) of ints, attend only where equal; causal: attend keys with k_pos <= q_pos;
    logn_length: if set, logits *= log(n_keys)/log(logn_length) per query. `scheme` is static
    (hashable), `params` its per-layer parameter pytree. See the module docstring for the order.
    shard_axes: (batch, head) mesh axes of q/k/v under the current mesh, for the kernel only
    (it runs per shard in shard_map: XLA cannot partition a Pallas kernel; see
    posjax.kernels.flash_attention); the XLA implementations ignore it (XLA partitions them).
    window: a local (sliding-window) layer, see tiles.window_mask; None = global. The lean
    path has no window mask: a windowed call that would run it runs the reference (chunked
    above AUTO_CHUNKED_MIN_KEYS keys) instead.
    sinks: [H] float learned sink logits (gpt-oss, x-transformers): one extra logit per head
    in every row's softmax denominator, with no value (None = none). Lean runs the
    reference instead.
    mask: lean.build_mask(q_pos, k_pos, kv_mask, segment_ids, causal), built once per forward
    by the caller, for the lean path only (built here when absent); the others ignore it.
    """
    check(window is None or (isinstance(window, (int, np.integer)) and not isinstance(window, bool)
                             and window >= 1), "window", window,
          "None (global attention) or an int >= 1 (sliding-window width in tokens)")
    validate(q, k, v, scheme, q_pos, k_pos, kv_mask, segment_ids, causal, logn_length,
             implementation, block_q, block_k)
    check(window is None or scheme is None or scheme.position_dims == 1, "window", window,
          "None for a 2-D position scheme (a sliding window compares 1-D positions)")
    scheme = _NO_SCHEME if scheme is None else scheme
    params = {} if params is None else params
    batch, len_q, len_k = q.shape[0], q.shape[1], k.shape[1]
    if q_pos is None:
        q_pos = jnp.broadcast_to(jnp.arange(len_q, dtype=jnp.int32), (batch, len_q))
    if k_pos is None:
        k_pos = jnp.broadcast_to(jnp.arange(len_k, dtype=jnp.int32), (batch, len_k))
    args = dict(scheme=scheme, params=params, q_pos=q_pos, k_pos=k_pos, kv_mask=kv_mask,
                segment_ids=segment_ids, causal=bool(causal), logn_length=logn_length)

    if sinks is not None:
        check(getattr(sinks, "shape", None) == (q.shape[2],) and hasattr(sinks, "dtype")
              and jnp.issubdtype(sinks.dtype, jnp.floating), "sinks",
              getattr(sinks, "shape", type(sinks).__name__),
              f"None or a float array [heads={q.shape[2]}] (one sink logit per head)")
        check(scheme.normalize is None, "sinks", "an array",
              f"None for position '{scheme.name}': its normalize hook replaces the softmax "
              "whose denominator a sink joins")
        args["sinks"] = sinks
    chosen = choose_implementation(implementation, scheme, len_k, logn_length, bool(causal))
    if implementation == "auto" and chosen == "reference" and native.usable(
            scheme, q, causal=causal, logn_length=logn_length, sinks=sinks,
            key_dim=native.key_dim(scheme, params, q, k, q_pos, k_pos)):
        # rows runs the compiled CPU kernel at every length: at 128-1024 keys its forward and
        # backward took 0.3-0.5x the reference's time (bench/long_attention_peer.md).
        chosen = "rows"
    if window is not None:
        args["window"] = int(window)
    if chosen == "lean" and (window is not None or sinks is not None):
        # lean's prebuilt mask has no window and its softmax no sink (same numbers either way)
        chosen = _xla_path(len_k, bool(causal), scheme)
    if chosen == "lean":
        if mask is None:
            mask = lean.build_mask(q_pos, k_pos, kv_mask, segment_ids, bool(causal))
        return lean.lean_attention(q, k, v, scheme=scheme, params=params, q_pos=q_pos,
                                   k_pos=k_pos, mask=mask)
    if chosen == "kernel":
        return kernels.flash_attention(q, k, v, block_q=block_q, block_k=block_k, shard_axes=shard_axes,
                               **args)
    if chosen == "chunked":
        return chunked_attention(q, k, v, block_q=block_q, block_k=block_k, **args)
    if chosen == "rows":
        return rows_attention(q, k, v, block_q=block_q, block_k=block_k, **args)
    return reference_attention(q, k, v, **args)


# -- dispatch -------------------------------------------------------------------------------


def choose_implementation(implementation: str, scheme: Scheme, len_k: int,
                          logn_length: Optional[float] = None, causal: bool = False) -> str:
    """Resolve 'auto' / 'kernel' / 'lean' to the implementation that will actually run.

    auto: the Pallas kernel on GPU/TPU when it supports the scheme; otherwise, with more
    than AUTO_CHUNKED_MIN_KEYS keys (AUTO_CHUNKED_MIN_KEYS_CARRIED for a scheme that
    `carries` state across key blocks), rows on CPU for bidirectional attention (measured the
    fastest there: bench/long_attention_peer.md) and chunked elsewhere (chunked also skips
    a causal pass's future tiles, which rows computes, and carries a scheme's state tile by
    tile: blocked_path); else reference, except that `attend`
    takes rows at any length wherever rows runs the compiled CPU kernel (native.usable). An
    explicit 'lean' runs
    the reference for the schemes lean does not run (lean.supports; same numbers). An
    explicit 'kernel' that
    is unavailable falls back to chunked (same numbers, O(L) memory) with a warning, except for
    the schemes the kernel can never run (its refusal: CoPE): ConfigError.
    """
    if implementation in ("reference", "chunked", "rows"):
        return implementation
    if implementation == "lean":
        return "lean" if lean.supports(scheme, logn_length) else "reference"
    if implementation == "kernel":
        if kernels.refusal(scheme):
            raise ConfigError("implementation", implementation,
                              KERNEL_ALTERNATIVES + kernels.refusal(scheme))
        if kernels.supports(scheme):
            return "kernel"
        _log_once(logging.WARNING, f"attention: implementation='kernel' is not available for "
                  f"scheme '{scheme.name}' on {jax.default_backend()}; using 'chunked'")
        return "chunked"
    if jax.default_backend() in ("gpu", "tpu", "cuda", "rocm"):
        if kernels.supports(scheme):
            return "kernel"
        _log_once(logging.INFO, f"attention: no Pallas kernel for scheme '{scheme.name}'; "
                  "auto uses the XLA implementations")
    return _xla_path(len_k, causal, scheme)


def carries(scheme) -> bool:
    """Whether a scheme (or its class) carries state across key blocks, outward from the
    query: `normalize` (stick-breaking's stick left), `carried_scores` (PaTH's products) or
    `count_gates` (CoPE's gate counts)."""
    return scheme is not None and (scheme.normalize is not None
                                   or scheme.carried_scores is not None
                                   or scheme.count_gates is not None)


def _xla_path(len_k: int, causal: bool, scheme=None) -> str:
    """auto's choice among the XLA implementations (choose_implementation)."""
    short = AUTO_CHUNKED_MIN_KEYS_CARRIED if carries(scheme) else AUTO_CHUNKED_MIN_KEYS
    return "reference" if len_k <= short else blocked_path(causal, scheme)


def blocked_path(causal: bool, scheme=None) -> str:
    """The O(L)-memory XLA implementation that runs fastest on this backend: rows on CPU for
    bidirectional attention (bench/long_attention_peer.md), chunked otherwise (it also skips
    a causal pass's future tiles, which rows computes) and for a scheme that `carries` state
    across key blocks: rows runs its hook over whole key rows, chunked over tiles with the
    state carried (CPU, one row of 8192 keys, 4 heads of 32: stick-breaking 3.8 vs 15.7 s,
    PaTH 4.2 vs 6.7 s, CoPE 2.8 vs 4.1 s)."""
    cpu_rows = jax.default_backend() == "cpu" and not causal and not carries(scheme)
    return "rows" if cpu_rows else "chunked"


def _log_once(level: int, message: str) -> None:
    # attend runs once per layer per trace; one line per distinct message is enough.
    if message not in _LOGGED:
        _LOGGED.add(message)
        logging.log(level, message)


# -- validation (plain Python on shapes: runs before any trace or compile) -----------------


def validate(q, k, v, scheme, q_pos, k_pos, kv_mask, segment_ids, causal, logn_length,
             implementation, block_q, block_k) -> None:
    """Raise ConfigError naming the first argument that `attend` cannot accept."""
    check(isinstance(implementation, str) and implementation in IMPLEMENTATIONS,
          "implementation", implementation, f"one of {', '.join(IMPLEMENTATIONS)}")
    check(scheme is None or isinstance(scheme, Scheme), "scheme", scheme,
          "None or a posjax.positions.Scheme (build it with posjax.positions.make)")
    for name, x in (("q", q), ("k", k), ("v", v)):
        shape = _shape(name, x)
        check(len(shape) == 4, f"{name}.shape", shape, "rank 4: [batch, length, heads, head_dim]")
        check(jnp.issubdtype(x.dtype, jnp.floating), f"{name}.dtype", x.dtype, "a float dtype")
    batch, len_q, heads, dim = q.shape
    len_k = k.shape[1]
    check(k.shape[0] == batch and k.shape[2:] == (heads, dim), "k.shape", k.shape,
          f"[batch={batch}, Lk, heads={heads}, head_dim={dim}] to match q {q.shape}")
    check(v.shape == k.shape, "v.shape", v.shape, f"the shape of k {k.shape}")
    if scheme is not None and scheme.attention_hooks:
        # Hooks read the model dims from the bound scheme (ALiBi's head count, NEZHA's depth).
        check(scheme.dims is not None, "scheme", scheme.name,
              "a scheme bound to the model dims (scheme.bind(dims); models do it once)")
        check((scheme.dims.num_heads, scheme.dims.head_dim) == (heads, dim), "scheme.dims",
              (scheme.dims.num_heads, scheme.dims.head_dim),
              f"(num_heads, head_dim) = {(heads, dim)} of q")
    # The chunked path walks a normalize scheme's key blocks outward from the query; CoPE's
    # counts are carried in array order.
    check(scheme is None or scheme.normalize is None or scheme.count_gates is None, "scheme",
          getattr(scheme, "name", None), "a scheme with at most one of normalize and count_gates")
    # carried_scores replace q.k and are carried outward like normalize's state.
    check(scheme is None or scheme.carried_scores is None or (
        scheme.scores is None and scheme.normalize is None and scheme.count_gates is None),
        "scheme", getattr(scheme, "name", None),
        "a scheme with carried_scores and none of scores, normalize and count_gates")
    # carried_keys only prepares a key tile for carried_scores.
    check(scheme is None or scheme.carried_keys is None or scheme.carried_scores is not None,
          "scheme", getattr(scheme, "name", None),
          "a scheme with carried_keys only alongside carried_scores (its companion)")
    # content_factors replace q.k too: one replacement at most.
    check(scheme is None or scheme.content_factors is None or (
        scheme.scores is None and scheme.carried_scores is None), "scheme",
        getattr(scheme, "name", None),
        "a scheme with content_factors and neither scores nor carried_scores")
    check(k.dtype == q.dtype and v.dtype == q.dtype, "k.dtype/v.dtype", (k.dtype, v.dtype),
          f"the dtype of q ({q.dtype})")
    _check_positions(scheme, q_pos, k_pos, (batch, len_q), (batch, len_k), causal)
    if kv_mask is not None:
        check(_shape("kv_mask", kv_mask) == (batch, len_k), "kv_mask.shape", kv_mask.shape,
              f"[batch, Lk] = {(batch, len_k)}")
        check(kv_mask.dtype == jnp.bool_, "kv_mask.dtype", kv_mask.dtype,
              "bool (True = real token)")
    if segment_ids is not None:
        check(isinstance(segment_ids, (tuple, list)) and len(segment_ids) == 2, "segment_ids",
              type(segment_ids).__name__, "a pair (q_segments [B, Lq], k_segments [B, Lk])")
        _check_int_array("segment_ids[0]", segment_ids[0], (batch, len_q))
        _check_int_array("segment_ids[1]", segment_ids[1], (batch, len_k))
    check(isinstance(causal, (bool, np.bool_)), "causal", causal, "a Python bool")
    if logn_length is not None:
        check(isinstance(logn_length, numbers.Real) and not isinstance(logn_length, bool)
              and logn_length >= 2, "logn_length", logn_length,
              "None or a number >= 2 (the training length)")
    for name, block in (("block_q", block_q), ("block_k", block_k)):
        check(isinstance(block, (int, np.integer)) and not isinstance(block, bool) and block >= 1,
              name, block, "an int >= 1")


def _check_positions(scheme, q_pos, k_pos, q_shape: tuple, k_shape: tuple, causal) -> None:
    """Positions [B, L] for 1-D schemes, [B, L, 2] (row, column) for 2-D ones (rope2d), which
    must be given (there is no default grid) and cannot be ordered by a causal mask."""
    dims = scheme.position_dims if scheme is not None else 1
    name = scheme.name if scheme is not None else "none"
    if dims == 1:
        what = (f"1-D positions for position '{name}' ([B, L, 2] (row, column) positions are "
                "for 2-D schemes such as rope2d)")
    else:
        coords = "(row, column)" if dims == 2 else "(t, h, w)" if dims == 3 else "grid"
        what = f"{coords} positions [B, L, {dims}] for the {dims}-D position '{name}'"
    for pos_name, x, shape in (("q_pos", q_pos, q_shape), ("k_pos", k_pos, k_shape)):
        full = shape + ((dims,) if dims > 1 else ())
        check(x is not None or dims == 1, pos_name, None, what)
        if x is not None:
            check(_shape(pos_name, x) == full, f"{pos_name}.shape", x.shape,
                  f"{list(full)}: {what}")
            check(jnp.issubdtype(x.dtype, jnp.integer), f"{pos_name}.dtype", x.dtype,
                  "an integer dtype")
    check(dims == 1 or not causal, "causal", causal,
          f"False for the {dims}-D position '{name}' ((row, column) pairs have no order)")


def _shape(name: str, x) -> tuple:
    shape = getattr(x, "shape", None)
    if shape is None or not hasattr(x, "dtype"):
        raise ConfigError(name, type(x).__name__, "an array (jax or numpy)")
    return tuple(shape)


def _check_int_array(name: str, x, shape: tuple) -> None:
    check(_shape(name, x) == shape, f"{name}.shape", x.shape, f"{list(shape)}")
    check(jnp.issubdtype(x.dtype, jnp.integer), f"{name}.dtype", x.dtype, "an integer dtype")


__all__ = ["attend", "choose_implementation", "blocked_path", "validate", "IMPLEMENTATIONS", "KERNEL_ALTERNATIVES",
           "MASK_VALUE",
           "reference_attention", "chunked_attention", "rows_attention"]
