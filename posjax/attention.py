"""One attention function, `attend`, that composes a position scheme's hooks.

Three implementations give the same numbers:
  reference  materializes [B, H, Lq, Lk] float32 logits. It is the readable definition of every
             hook, mask and scale; the other two are tested against it.
  chunked    (posjax/attention_chunked.py) query blocks x key blocks with an online softmax in
             plain JAX, memory O(L x block) forward and backward; runs 16k tokens on a laptop.
  kernel     Pallas flash attention from posjax.kernels (GPU/TPU), imported lazily.

The order of operations (the contract every implementation follows):
  (q, k) = scheme.rotate(q, k)             if rotate and no scores (scores gets q, k unrotated)
  raw = scheme.scores(q, k) if scores else q . k   (input dtype, float32 accumulation)
  raw += scheme.content_logits(q, k)       raw logit terms, before the scale
  logits = raw * scheme.logit_scale(D) + scheme.bias(q_pos, k_pos)
  logits *= log(n_keys) / log(logn_length) n_keys = keys this query may attend (after masks)
  masks: kv_mask, segment_ids (equal ids only), causal (k_pos <= q_pos, by POSITIONS)
  p = float32 softmax; a row with no key to attend gives p = 0, output 0, never NaN
  out = p @ v + scheme.content_values(p)   cast to q.dtype

Validation is plain Python on shapes and dtypes, so a bad input raises ConfigError before any
trace or compile (and also works when `attend` is called inside jitted model code).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from posjax.errors import ConfigError, check
from posjax.positions.base import Scheme

IMPLEMENTATIONS = ("reference", "chunked", "kernel", "auto")

# 'auto' picks chunked above this many keys: at 1024 keys the reference's [B, H, L, L] float32
# logits are 4 MiB per (batch, head), still cheap; beyond, they grow quadratically.
AUTO_CHUNKED_MIN_KEYS = 1024

# Masked logits are set to this FINITE value instead of -inf: with -inf a fully masked row
# computes exp(-inf - -inf) = NaN, and NaN leaks into gradients even through `where`.
MASK_VALUE = -1e30

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
) -> jax.Array:
    """Multi-head attention with a position scheme's hooks; returns [B, Lq, H, D] in q.dtype.

    q [B, Lq, H, D], k and v [B, Lk, H, D]; q_pos [B, Lq] and k_pos [B, Lk] integer positions
    (default arange); kv_mask [B, Lk] bool, True = real token; segment_ids a pair ([B, Lq],
    [B, Lk]) of ints, attend only where equal; causal: attend keys with k_pos <= q_pos;
    logn_length: if set, logits *= log(n_keys)/log(logn_length) per query. `scheme` is static
    (hashable), `params` its per-layer parameter pytree. See the module docstring for the order.
    shard_axes: (batch, head) mesh axes of q/k/v under the current mesh, for the kernel only
    (it runs per shard in shard_map: XLA cannot partition a Pallas kernel; see
    posjax.kernels.flash_attention); the XLA implementations ignore it (XLA partitions them).
    """
    validate(q, k, v, scheme, q_pos, k_pos, kv_mask, segment_ids, causal, logn_length,
             implementation, block_q, block_k)
    scheme = _NO_SCHEME if scheme is None else scheme
    params = {} if params is None else params
    batch, len_q, len_k = q.shape[0], q.shape[1], k.shape[1]
    if q_pos is None:
        q_pos = jnp.broadcast_to(jnp.arange(len_q, dtype=jnp.int32), (batch, len_q))
    if k_pos is None:
        k_pos = jnp.broadcast_to(jnp.arange(len_k, dtype=jnp.int32), (batch, len_k))
    args = dict(scheme=scheme, params=params, q_pos=q_pos, k_pos=k_pos, kv_mask=kv_mask,
                segment_ids=segment_ids, causal=bool(causal), logn_length=logn_length)

    chosen = choose_implementation(implementation, scheme, len_k)
    if chosen == "kernel":
        from posjax import kernels

        return kernels.flash_attention(q, k, v, block_q=block_q, block_k=block_k,
                                       shard_axes=shard_axes, **args)
    if chosen == "chunked":
        from posjax.attention_chunked import chunked_attention

        return chunked_attention(q, k, v, block_q=block_q, block_k=block_k, **args)
    return reference_attention(q, k, v, **args)


# -- dispatch -------------------------------------------------------------------------------


def choose_implementation(implementation: str, scheme: Scheme, len_k: int) -> str:
    """Resolve 'auto' / 'kernel' to the implementation that will actually run.

    auto: the Pallas kernel on GPU/TPU when it supports the scheme; otherwise chunked when
    there are more than AUTO_CHUNKED_MIN_KEYS keys, else reference. An explicit 'kernel' that
    is unavailable falls back to chunked (same numbers, O(L) memory) with a warning.
    """
    if implementation in ("reference", "chunked"):
        return implementation
    if implementation == "kernel":
        if _kernel_supports(scheme):
            return "kernel"
        _log_once(logging.WARNING, f"attention: implementation='kernel' is not available for "
                  f"scheme '{scheme.name}' on {jax.default_backend()}; using 'chunked'")
        return "chunked"
    if jax.default_backend() in ("gpu", "tpu", "cuda", "rocm"):
        if _kernel_supports(scheme):
            return "kernel"
        _log_once(logging.INFO, f"attention: no Pallas kernel for scheme '{scheme.name}'; "
                  "auto uses the XLA implementations")
    return "chunked" if len_k > AUTO_CHUNKED_MIN_KEYS else "reference"


def _kernel_supports(scheme: Scheme) -> bool:
    # Imported lazily: posjax.kernels is optional (Pallas, accelerators) and must never break
    # the XLA paths.
    try:
        from posjax import kernels

        return bool(kernels.supports(scheme))
    except (ImportError, AttributeError) as err:
        _log_once(logging.INFO, f"attention: posjax.kernels unavailable ({err})")
        return False


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
    check(k.dtype == q.dtype and v.dtype == q.dtype, "k.dtype/v.dtype", (k.dtype, v.dtype),
          f"the dtype of q ({q.dtype})")
    for name, x, length in (("q_pos", q_pos, len_q), ("k_pos", k_pos, len_k)):
        if x is not None:
            _check_int_array(name, x, (batch, length))
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


def _shape(name: str, x) -> tuple:
    shape = getattr(x, "shape", None)
    if shape is None or not hasattr(x, "dtype"):
        raise ConfigError(name, type(x).__name__, "an array (jax or numpy)")
    return tuple(shape)


def _check_int_array(name: str, x, shape: tuple) -> None:
    check(_shape(name, x) == shape, f"{name}.shape", x.shape, f"{list(shape)}")
    check(jnp.issubdtype(x.dtype, jnp.integer), f"{name}.dtype", x.dtype, "an integer dtype")


# -- shared pieces: used by the reference on whole arrays and by chunked on tiles ------------


def rotate(scheme: Scheme, params, q, k, q_pos, k_pos):
    """Apply the rotate hook to whole q, k (elementwise in position: O(L) memory).

    A scheme with `scores` gets q, k unrotated (its scores hook does its own rotations).
    """
    if scheme.rotate is not None and scheme.scores is None:
        q, k = scheme.rotate(params, q, k, q_pos, k_pos)
    return q, k


def tile_logits(scheme: Scheme, params, q, k, q_pos, k_pos) -> jax.Array:
    """Scaled logits [B, H, q, k] float32 of a (query tile, key tile), before log-n and masks."""
    if scheme.scores is not None:
        raw = scheme.scores(params, q, k, q_pos, k_pos).astype(jnp.float32)
    else:
        # q.k in the input dtype, accumulated in float32.
        raw = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
    if scheme.content_logits is not None:
        raw = raw + scheme.content_logits(params, q, k, q_pos, k_pos).astype(jnp.float32)
    logits = raw * jnp.float32(scheme.logit_scale(q.shape[-1]))
    if scheme.bias is not None:
        logits = logits + scheme.bias(params, q_pos, k_pos).astype(jnp.float32)
    return logits


def tile_mask(q_pos, k_pos, kv_mask, q_seg, k_seg, causal: bool) -> Optional[jax.Array]:
    """Which (query, key) pairs may attend, broadcastable to [B, 1, q, k]; None = all."""
    masks = []
    if kv_mask is not None:
        masks.append(kv_mask[:, None, None, :])
    if q_seg is not None:
        masks.append((q_seg[:, :, None] == k_seg[:, None, :])[:, None])
    if causal:
        masks.append((k_pos[:, None, :] <= q_pos[:, :, None])[:, None])
    if not masks:
        return None
    mask = masks[0]
    for extra in masks[1:]:
        mask = mask & extra
    return mask


def count_keys(mask: Optional[jax.Array], shape: tuple) -> jax.Array:
    """Number of keys each query may attend, [B, 1, q] int32, from a tile mask of `shape`."""
    batch, _, len_q, len_k = shape
    if mask is None:
        return jnp.full((batch, 1, len_q), len_k, jnp.int32)
    return jnp.broadcast_to(mask, shape).sum(-1, dtype=jnp.int32)


def logn_factor(n_keys: jax.Array, logn_length: float) -> jax.Array:
    """log(n)/log(logn_length) as float32 [B, 1, q, 1]; n < 1 (no key) maps to 0, not -inf."""
    n = jnp.maximum(n_keys, 1).astype(jnp.float32)
    return (jnp.log(n) / jnp.float32(math.log(logn_length)))[..., None]


def combine_values(scheme: Scheme, params, probs, v, q_pos, k_pos) -> jax.Array:
    """probs @ v (+ content_values), [B, q, H, D] float32. Linear in probs, so chunked calls
    it with unnormalized tile probabilities and rescales like an online softmax."""
    out = jnp.einsum("bhqk,bkhd->bqhd", probs.astype(v.dtype), v,
                     preferred_element_type=jnp.float32)
    if scheme.content_values is not None:
        out = out + scheme.content_values(params, probs, q_pos, k_pos).astype(jnp.float32)
    return out


# -- the reference implementation -----------------------------------------------------------


def reference_attention(q, k, v, *, scheme, params, q_pos, k_pos, kv_mask, segment_ids, causal,
                        logn_length):
    """Materialize [B, H, Lq, Lk] logits: the readable definition the other paths must match."""
    q_seg, k_seg = segment_ids if segment_ids is not None else (None, None)
    q, k = rotate(scheme, params, q, k, q_pos, k_pos)
    logits = tile_logits(scheme, params, q, k, q_pos, k_pos)
    mask = tile_mask(q_pos, k_pos, kv_mask, q_seg, k_seg, causal)
    if logn_length is not None:
        logits = logits * logn_factor(count_keys(mask, logits.shape), logn_length)
    if mask is not None:
        logits = jnp.where(mask, logits, MASK_VALUE)
    # The max only stabilizes exp; softmax does not depend on it, so no gradient through it.
    m = jax.lax.stop_gradient(logits.max(-1, keepdims=True))
    p = jnp.exp(logits - m)
    if mask is not None:
        p = jnp.where(mask, p, 0.0)  # a fully masked row: all zeros instead of uniform
    total = p.sum(-1, keepdims=True)
    probs = p / jnp.where(total > 0, total, 1.0)
    return combine_values(scheme, params, probs, v, q_pos, k_pos).astype(q.dtype)
