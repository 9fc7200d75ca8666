"""Building blocks: dense, layer norm, embedding table, MLP, self-attention, one layer.

Mixed precision throughout: parameters are float32 and are cast to the compute dtype at use;
layer norms run in float32; attention's softmax is float32 inside `attend`.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from posjax.attention import attend
from posjax.attention.lean import LeanMask
from posjax.models import cpu_ops
from posjax.models.partitioning import (
    HookParams,
    Names,
    attention_shard_axes,
    batch_shards,
    constrain,
    gathered,
    kernel_init,
    kernel_initializer,
    next_key,
    ones_init,
    param,
    zeros_init,
)
from posjax.models.remat import ATTENTION_OUT
from posjax.models.spec import ACTIVATIONS, ModelSpec
from posjax.tiling import mixed

BLE = ("batch", "length", "embed")
BLHD = ("batch", "length", "heads", "kv")


def dropout(x: jax.Array, rate: float, deterministic: bool, rngs: Optional[nnx.Rngs]):
    """Inverted dropout drawing from the 'dropout' stream; identity when off."""
    if deterministic or rate == 0.0:
        return x
    if rngs is None:
        raise ValueError("dropout is on (deterministic=False, rate > 0) but no rngs were given")
    keep, keep_prob = keep_mask(next_key(rngs.dropout), rate, x.shape)
    return jnp.where(keep, x / keep_prob, 0).astype(x.dtype)


def _mix32(x: jax.Array) -> jax.Array:
    # A 32-bit integer finalizer (Wellons' "lowbias32"): a bijection whose output bits each
    # flip with probability ~1/2 when any input bit flips.
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def keep_mask(key: jax.Array, rate: float, shape: tuple) -> tuple[jax.Array, float]:
    """(bool mask of `shape`, its exact keep probability): each element kept with probability
    1 - rate, independently of the others in any test a training run can tell.

    Why not jax.random.bernoulli: threefry's 20 rounds per pair of words made dropout a fifth
    of a small model's training step on XLA:CPU (11 masks of [128, 80, 64]; bench/README.md,
    "Small-model step"). Here the key gives two 32-bit seeds (one threefry call on 2 words),
    and each element's word is two rounds of a 32-bit mixer over its flat index and the seeds:
    about 12 integer ops an element, fused into the consumer. The keep probability is
    1 - round(rate * 2^32) / 2^32, which the caller divides by (unbiased to the bit).
    """
    size = math.prod(shape)
    if size >= 2**32:  # the flat index would wrap: keep threefry for such masks
        return jax.random.bernoulli(key, 1.0 - rate, shape), 1.0 - rate
    seeds = jax.random.bits(key, (2,), jnp.uint32)
    index = jax.lax.iota(jnp.uint32, size).reshape(shape)
    word = _mix32(_mix32(index + seeds[0]) ^ seeds[1])
    threshold = min(round(rate * 2.0**32), 2**32 - 1)
    return word >= jnp.uint32(threshold), 1.0 - threshold / 2.0**32


class Dense(nnx.Module):
    """y = x . W + b, contracting the last len(in_shape) axes of x; W is [*in, *out].

    Multi-axis kernels ([E, H, D] for queries, [H, D, E] for the output) keep the head axis
    explicit, so sharding heads over the tensor axis is one logical name.
    """

    def __init__(
        self,
        in_shape: Sequence[int],
        out_shape: Sequence[int],
        names: Names,
        *,
        dtype,
        rngs: nnx.Rngs,
        use_bias: bool = True,
        init: str = "normal",
    ):
        self.n_in = len(in_shape)
        self.dtype = dtype
        self.names = tuple(names)
        self.kernel = param(next_key(rngs.params), kernel_initializer(init, math.prod(in_shape)),
                            (*in_shape, *out_shape), names)
        self.bias = (
            param(next_key(rngs.params), zeros_init, tuple(out_shape), names[self.n_in :])
            if use_bias
            else None
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return _apply(x, gathered(self.kernel[...], self.names),
                      None if self.bias is None else self.bias[...], self.n_in, self.dtype)


def _apply(x, kernel, bias, n_in: int, dtype) -> jax.Array:
    # Inputs in the compute dtype, products accumulated in float32: a bf16 x bf16 -> bf16
    # dot is turned back into a float32 dot by XLA:CPU (no bf16 matmul runs at all), while
    # bf16 operands with a float32 result stay a real bf16 dot on CPU, GPU and TPU.
    # (posjax.tiling.mixed: the backward dots too).
    x, kernel = x.astype(dtype), kernel.astype(dtype)
    if cpu_ops.dense_usable(x, kernel):
        y = cpu_ops.dense(x, kernel, n_in)
    else:
        y = mixed.contract_last(x, kernel, n_in)
    if bias is not None:
        y = y + bias  # float32, before the one rounding to the compute dtype
    return y.astype(dtype)


def stacked(denses: Sequence[Dense], x: jax.Array, names: Names) -> list[jax.Array]:
    """[d(x) for d in denses] from ONE matmul: the kernels (same shapes, `names` their
    logical axes, at least two output axes) are stacked at use time on a new axis right after
    the first output axis ([E, H, 3, D] for q, k, v); the parameters stay separate
    (checkpoints and the HF conversion see the same tree).

    Why: the input gradient is then one product summed over every output, so under tensor
    parallelism (heads split over 'tensor') it is one all-reduce of [B, L, E] instead of one
    per projection. The new axis goes after the heads, not before them, so that the outputs
    flattened for the matmul ([E, H * 3 * D] on CPU, posjax.tiling.mixed) still have the
    split head axis outermost: each device's slice stays contiguous, no kernel is gathered
    across 'tensor'. The forward values are the separate products' (each output sums over the
    same inputs); the input gradient is summed in float32 before its one rounding to the
    compute dtype, where the separate projections rounded each part and added them.
    """
    n = denses[0].n_in
    kernel = gathered(jnp.stack([d.kernel[...] for d in denses], axis=n + 1),
                      (*names[:n + 1], None, *names[n + 1:]))
    bias = (None if denses[0].bias is None
            else jnp.stack([d.bias[...] for d in denses], axis=1))
    y = _apply(x, kernel, bias, n, denses[0].dtype)
    axis = x.ndim - n + 1  # the stacking axis in the output
    return [jax.lax.index_in_dim(y, i, axis, keepdims=False) for i in range(len(denses))]


class LayerNorm(nnx.Module):
    """LayerNorm over the last axis, computed in float32, returned in `dtype`."""

    def __init__(self, features: int, *, eps: float, dtype, rngs: nnx.Rngs,
                 use_bias: bool = True):
        self.eps = eps
        self.dtype = dtype
        self.scale = param(next_key(rngs.params), ones_init, (features,), ("embed",))
        # ModernBERT's norms have no bias (model.norm_bias=False): no parameter at all, so
        # weight decay and checkpoints see exactly the model's parameters.
        self.bias = param(next_key(rngs.params), zeros_init, (features,), ("embed",)) if use_bias else None

    def __call__(self, x: jax.Array) -> jax.Array:
        shape = x.shape
        x = x.astype(jnp.float32)
        scale = self.scale[...]
        if scale.dtype == jnp.float32 and cpu_ops.usable(x):  # one pass per row, both ways
            bias = None if self.bias is None else self.bias[...]
            return cpu_ops.layer_norm(x, scale, bias, self.eps).astype(self.dtype)
        if x.ndim > 2 and math.prod(shape[:-2]) == 1:
            # One row (a long input's batch of 1): XLA:CPU's library reductions over
            # [1, L, E] ran 6-30x slower than over the same [L, E] (the statistics here and
            # the scale's gradient, a sum over tokens; bench/long_attention_peer.md, "Reductions").
            x = x.reshape(shape[-2:])
        mean = x.mean(-1, keepdims=True)
        var = jnp.square(x - mean).mean(-1, keepdims=True)
        y = (x - mean) * jax.lax.rsqrt(var + self.eps) * scale
        if self.bias is not None:
            y = y + self.bias[...]
        return y.reshape(shape).astype(self.dtype)


def layer_norm(spec: ModelSpec, features: int, dtype, rngs: nnx.Rngs) -> LayerNorm:
    """A LayerNorm with the model's eps and bias setting."""
    return LayerNorm(features, eps=spec.layer_norm_eps, dtype=dtype, rngs=rngs,
                     use_bias=spec.norm_bias)


class Embed(nnx.Module):
    """A [num, features] table: lookup by id, and `attend` for a tied output projection."""

    def __init__(self, num: int, features: int, names: Names, *, rngs: nnx.Rngs):
        self.names = tuple(names)
        self.embedding = param(next_key(rngs.params), kernel_init, (num, features), names)

    def __call__(self, ids: jax.Array, shared: Optional[jax.Array] = None) -> jax.Array:
        """Rows for `ids` [B, L] -> [B, L, features] float32 (the embed hook and the embedding
        norm work in float32), split like every activation: batch over ('data', 'fsdp').

        Under a mesh the gather's output sharding is stated, not left to XLA. Unannotated, the
        lookup inherits the table's split of the feature axis (over 'fsdp'), and XLA can only
        reach the batch split its consumers want by replicating the whole [B, L, E] activation
        ("Involuntary full rematerialization"), forward, backward and in eval. So the table is
        first gathered whole along its feature axis, as FSDP does with every weight before
        use, while its row axis keeps its split (over 'tensor' in 'fsdp_tp': each device looks
        up the rows it holds and one all-reduce over 'tensor' sums them, Megatron's
        vocab-parallel embedding). The backward pass mirrors it: the scattered gradient is
        reduce-scattered back onto the table's split.

        shared: `self.shared(B)`, the table once per batch shard, when the table is tied to an
        output projection (`attend` takes the same value): each shard looks up its rows in
        its own copy.
        """
        if shared is not None:
            n = shared.shape[0]
            per_shard = constrain(ids.reshape(n, -1, *ids.shape[1:]),
                                  ("batch",) + (None,) * ids.ndim)
            out = jax.vmap(lambda t, i: jnp.take(t, i, axis=0))(shared, per_shard)
            return constrain(out.reshape(*ids.shape, -1), BLE)
        table = constrain(self.embedding[...], (self.names[0], None))
        out = jnp.take(table, ids, axis=0)
        return constrain(out, BLE) if out.ndim == 3 else out

    def shared(self, batch: int) -> Optional[jax.Array]:
        """The table broadcast to one copy per batch shard, [n, num, features], split over the
        batch axes on its first axis (no communication: each device holds its copy, gathered
        along the feature axis as in `__call__`), for a table used twice (the tied lookup and
        LM head); None without a mesh, or when `batch` rows do not split n ways.

        Why: each use's table gradient is then a per-shard partial sum kept as such; autodiff
        adds the lookup's and the head's parts on each device, and the broadcast's transpose
        (a sum over the shards) is the one collective (a reduce-scatter onto the table's split
        and / or an all-reduce over 'data'). With the [num, features] table used directly,
        XLA reduces each use's gradient across the batch shards where it is made, before the
        two are added: two collectives of the whole table, and under FSDP the table is
        gathered once per use.
        """
        n = batch_shards()
        if n is None or batch % n:
            return None
        table = self.embedding[...]
        return constrain(jnp.broadcast_to(table, (n, *table.shape)),
                         ("batch", self.names[0], None))

    def attend(self, h: jax.Array, shared: Optional[jax.Array] = None) -> jax.Array:
        """h . table^T in h's dtype, accumulated and returned in float32 (the logits); with
        `shared` (see `shared`), each batch shard's rows of h against its copy."""
        if shared is not None:
            n = shared.shape[0]
            flat = constrain(h.reshape(n, -1, h.shape[-1]), ("batch", None, None))
            logits = mixed.einsum("nqe,nve->nqv", flat, shared.astype(h.dtype))
            return logits.reshape(*h.shape[:-1], shared.shape[1])
        table = self.embedding[...].astype(h.dtype)
        flat = h.reshape(-1, h.shape[-1])  # mixed.einsum takes no ellipsis
        logits = mixed.einsum("ne,ve->nv", flat, table)
        return logits.reshape(*h.shape[:-1], table.shape[0])


class Mlp(nnx.Module):
    """BERT's act(x W_i) W_o, or with spec.mlp='glu' the gated (act(x W_i) * x W_g) W_o.

    The gated kernel is one [hidden, 2, mlp_dim] Dense, input half first and gate second (the
    order of ModernBERT's Wi.chunk(2)): one matmul, and the 'mlp' axis shards the same way as
    the dense MLP's.
    """

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        dt = spec.compute_dtype
        self.activation = spec.activation
        self.glu = spec.mlp == "glu"
        out = (2, spec.mlp_dim) if self.glu else (spec.mlp_dim,)
        names = ("embed", None, "mlp") if self.glu else ("embed", "mlp")
        kw = dict(dtype=dt, rngs=rngs, use_bias=spec.mlp_bias, init=spec.kernel_init)
        self.wi = Dense((spec.hidden,), out, names, **kw)
        self.wo = Dense((spec.mlp_dim,), (spec.hidden,), ("mlp", "embed"), **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = mlp_activation(self.wi(x), self.activation, self.glu)
        h = constrain(h, ("batch", "length", "mlp"))
        return self.wo(h)


@functools.partial(jax.checkpoint, static_argnums=(1, 2))
def mlp_activation(h: jax.Array, activation: str, glu: bool) -> jax.Array:
    """The MLP's activation (its GLU product if glu: h is [..., 2, mlp]), recomputed in the
    backward from h alone: autodiff would otherwise keep every intermediate of the
    activation (erf, its products, the two halves) for each layer, 3 times the size of h."""
    if glu:
        return ACTIVATIONS[activation](h[..., 0, :]) * h[..., 1, :]
    return ACTIVATIONS[activation](h)


class AttentionInputs(NamedTuple):
    """What every layer's attention needs besides q, k, v, built once per forward by the
    encoder (batch['attention']): kv_mask, segment_ids (None for dense rows) and the lean
    path's prebuilt mask (None unless the lean path runs and something is masked)."""

    kv_mask: Optional[jax.Array]
    segment_ids: Optional[tuple]
    mask: Optional[LeanMask]


class SelfAttention(nnx.Module):
    """Multi-head self-attention; all position handling is delegated to `attend`."""

    def __init__(self, spec: ModelSpec, scheme: Any, *, rngs: nnx.Rngs,
                 window: Optional[int] = None):
        """window: a local layer's sliding window (None = global)."""
        dt = spec.compute_dtype
        e, h, d = spec.hidden, spec.num_heads, spec.head_dim
        self.spec = spec
        self.scheme = scheme
        self.window = window
        kw = dict(dtype=dt, rngs=rngs, use_bias=spec.attention_bias, init=spec.kernel_init)
        self.query = Dense((e,), (h, d), ("embed", "heads", "kv"), **kw)
        self.key = Dense((e,), (h, d), ("embed", "heads", "kv"), **kw)
        self.value = Dense((e,), (h, d), ("embed", "heads", "kv"), **kw)
        self.out = Dense((h, d), (e,), ("heads", "kv", "embed"), **kw)
        # Learned sink logits, one per head (gpt-oss): start at 0, i.e. one extra key whose
        # logit is that of a key orthogonal to the query.
        self.sinks = (param(next_key(rngs.params), zeros_init, (h,), ("heads",))
                      if spec.attention_sinks else None)

    def __call__(self, x: jax.Array, hook_params: Any, batch: dict,
                 query: Optional[jax.Array] = None) -> jax.Array:
        """Queries from `query` when given (DeBERTa's enhanced mask decoder), else from x."""
        spec = self.spec
        # q, k and v from one stacked matmul (`stacked`: one input-gradient all-reduce under
        # tensor parallelism); with separate query states, k and v only.
        names = ("embed", "heads", "kv")
        if query is None:
            q, k, v = stacked((self.query, self.key, self.value), x, names)
        else:
            q = self.query(query)
            k, v = stacked((self.key, self.value), x, names)
        q, k, v = (constrain(y, BLHD) for y in (q, k, v))
        pos, seg = batch["positions"], batch["segment_ids"]
        inputs = batch.get("attention")
        if inputs is None:  # a layer called on its own, outside the encoder
            inputs = AttentionInputs(seg > 0, (seg, seg), None)  # packed examples stay apart
        out = attend(
            q,
            k,
            v,
            scheme=self.scheme,
            params=hook_params,
            q_pos=pos,
            k_pos=pos,
            kv_mask=inputs.kv_mask,
            segment_ids=inputs.segment_ids,
            mask=inputs.mask,
            causal=spec.causal,
            logn_length=spec.logn_length,
            implementation=spec.attention,
            block_q=spec.block_q,
            block_k=spec.block_k,
            shard_axes=attention_shard_axes(),  # used by the kernel only
            window=self.window,
            sinks=None if self.sinks is None else self.sinks[...],
        )
        out = checkpoint_name(out, ATTENTION_OUT)  # what model.remat='layer' keeps
        return self.out(constrain(out, BLHD))


@jax.custom_vjp
def cotangent_once(x: jax.Array) -> jax.Array:
    """Identity whose cotangent is computed once, into one buffer.

    A pre-LN residual stream's cotangent is a chain of adds through every later layer. XLA
    fuses cheap elementwise producers into each consumer, so without a materialization point
    every weight gradient's operand transpose recomputed the whole chain from the last layer
    down (quadratic in depth; 6 of the 2048-token training step's largest fusions). The
    barrier ends each chain at a sublayer's input.
    """
    return x


cotangent_once.defvjp(lambda x: (x, None),
                      lambda _, ct: (jax.lax.optimization_barrier(ct),))


class TransformerLayer(nnx.Module):
    """Attention + MLP with residuals, post-LN (BERT) or pre-LN.

    Holds its own scheme hook params unless the scheme shares one set across layers, in which
    case the encoder passes the shared set in. Under ALBERT sharing the one layer module (and
    with it its hook params) is applied num_layers times.
    """

    def __init__(self, spec: ModelSpec, scheme: Any, *, rngs: nnx.Rngs,
                 attention_norm: bool = True, window: Optional[int] = None):
        """attention_norm=False: a pre-LN layer whose attention reads x unnormalized
        (ModernBERT's layer 0, right after the embedding norm).
        window: a local layer's sliding window (None = global; layout.plan)."""
        dt = spec.compute_dtype
        self.spec = spec
        self.attention = SelfAttention(spec, scheme, rngs=rngs, window=window)
        self.mlp = Mlp(spec, rngs=rngs)
        self.attention_norm = layer_norm(spec, spec.hidden, dt, rngs) if attention_norm else None
        self.mlp_norm = layer_norm(spec, spec.hidden, dt, rngs)
        self.hook = None if scheme.share_layers else HookParams(scheme.init_layer(next_key(rngs.params)))
        self.scheme = scheme  # its layer_input hook, if any, acts on this layer's input

    def __call__(
        self,
        x: jax.Array,
        batch: dict,
        *,
        shared_hook: Any = None,
        deterministic: bool = True,
        rngs: Optional[nnx.Rngs] = None,
        query: Optional[jax.Array] = None,
    ) -> jax.Array:
        """query: the states the queries (and the residual) come from, when they are not x
        (the enhanced mask decoder); keys and values always come from x."""
        spec = self.spec
        hook = shared_hook if self.hook is None else self.hook.value()
        drop = lambda y: dropout(y, spec.dropout, deterministic, rngs)  # noqa: E731
        if self.scheme.layer_input is not None:  # convolutional position, placement='layers'
            x = constrain(self.scheme.layer_input(hook, x, batch["positions"]), BLE)
        if spec.post_ln:
            res = x if query is None else query
            x = self.attention_norm(res + drop(self.attention(x, hook, batch, query)))
            x = constrain(x, BLE)
            x = self.mlp_norm(x + drop(self.mlp(x)))
        else:
            res = x if query is None else query
            norm = self.attention_norm or (lambda y: y)
            normed_q = None if query is None else norm(query)
            x = res + drop(self.attention(norm(cotangent_once(x)), hook, batch, normed_q))
            x = cotangent_once(constrain(x, BLE))
            x = x + drop(self.mlp(self.mlp_norm(x)))
        return constrain(x, BLE)
