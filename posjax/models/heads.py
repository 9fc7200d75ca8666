"""Output heads: the tied LM head (masked or causal) and ALBERT's sentence-order head."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from posjax.models.layers import Dense, Embed, layer_norm
from posjax.models.partitioning import constrain, next_key, param, zeros_init
from posjax.models.spec import ACTIVATIONS, ModelSpec


class LMHead(nnx.Module):
    """BERT's MLM head: Dense + activation + LayerNorm, then the TIED word embedding.

    logits = LN(act(h W + b)) E^T + out_bias. The transform maps hidden -> embedding_dim, which
    is BERT's Dense(hidden) when unfactorized and ALBERT's Dense(hidden -> E) when factorized,
    so the tied table E [vocab, embedding_dim] fits in both cases. The table is not owned here:
    it is passed in at call time, so gradients of the logits reach the input embedding.
    """

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        dt = spec.compute_dtype
        self.activation = spec.head_activation
        self.transform = Dense(
            (spec.hidden,), (spec.embedding_dim,), ("embed", None), dtype=dt, rngs=rngs,
            use_bias=spec.head_bias, init=spec.kernel_init,
        )
        self.norm = layer_norm(spec, spec.embedding_dim, dt, rngs)
        self.bias = param(next_key(rngs.params), zeros_init, (spec.vocab_size,), ("vocab",))

    def features(self, h: jax.Array) -> jax.Array:
        """The transformed hidden states that meet the tied table."""
        return self.norm(ACTIVATIONS[self.activation](self.transform(h)))

    def __call__(self, h: jax.Array, word: Embed, shared=None) -> jax.Array:
        """shared: the table per batch shard the lookup used (Embed.shared), or None."""
        logits = word.attend(self.features(h), shared) + self.bias[...]
        return constrain(logits, ("batch", "length", "vocab"))  # float32


class SopHead(nnx.Module):
    """Pooler (Dense + tanh on the first token, [CLS]) then Dense(2): sentence-order logits."""

    def __init__(self, spec: ModelSpec, *, rngs: nnx.Rngs):
        dt = spec.compute_dtype
        kw = dict(dtype=dt, rngs=rngs, init=spec.kernel_init)
        self.pooler = Dense((spec.hidden,), (spec.hidden,), ("embed", None), **kw)
        self.classifier = Dense((spec.hidden,), (2,), ("embed", None), **kw)

    def __call__(self, h: jax.Array) -> jax.Array:
        pooled = jnp.tanh(self.pooler(h[:, 0]))
        return self.classifier(pooled).astype(jnp.float32)
