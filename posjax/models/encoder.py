"""The Transformer stack: embeddings (+ the scheme's embed hook) and the layers.

One class covers BERT (post-LN, learned positions), NEZHA and RoFormer (positions inside
attention), ALBERT (factorized embeddings, one shared layer) and the causal-LM variant
(`spec.causal`: the same stack with a causal mask).
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
from flax import nnx

from posjax.attention import choose_implementation, lean
from posjax.models.layers import (BLE, AttentionInputs, Dense, Embed, TransformerLayer,
                                  dropout, layer_norm)
from posjax.models import layout, remat
from posjax.models.partitioning import HookParams, constrain, next_key
from posjax.models.spec import ModelSpec


ENCODER_KEYS = ("input_ids", "positions", "segment_ids")


def encoder_inputs(batch: dict, spec: ModelSpec, contract: str) -> dict:
    """The arrays the encoder reads from `batch` (token_type_ids only where the model has
    token types); KeyError naming what is missing and `contract`, where the batch's layout is
    described. Targets and anything else in the batch are the losses' business."""
    keys = ENCODER_KEYS + (("token_type_ids",) if spec.type_vocab_size > 0 else ())
    missing = [k for k in keys if k not in batch]
    if missing:
        raise KeyError(f"batch is missing {missing}; see {contract}")
    # layer_positions [B, num_layers, L]: each layer's own positions (data.randomized_layers)
    keys += ("layer_positions",) if "layer_positions" in batch else ()
    return {k: jnp.asarray(batch[k]) for k in keys}


def as_rngs(rngs: Any) -> Optional[nnx.Rngs]:
    """Accept nnx.Rngs or a bare PRNG key (used as the 'dropout' stream)."""
    if rngs is None or isinstance(rngs, nnx.Rngs):
        return rngs
    return nnx.Rngs(dropout=rngs)


class Embeddings(nnx.Module):
    """word (+ embed hook) + token type -> LayerNorm -> dropout [-> ALBERT projection].

    Everything before the projection lives in the embedding width `spec.embedding_dim`,
    including an embed-hook scheme's table (ALBERT adds its position table there too), and is
    computed in float32; the result is cast to the compute dtype.

    spec.embedding_style='scaled' is the embedder of Vaswani et al. as Ruoss et al.'s
    reference has it (google-deepmind/randomized_positional_encodings, models/transformer.py
    TransformerEmbedder): sqrt(embedding_dim) * word (+ the embed hook's position vector),
    no LayerNorm, and dropout only where a position vector was added (the reference drops
    after adding sin/cos or learned encodings, and not at all for RoPE, relative, ALiBi or
    none). Token type embeddings are added if the model has them (the reference has none).
    """

    def __init__(self, spec: ModelSpec, scheme: Any, *, rngs: nnx.Rngs):
        e = spec.embedding_dim
        self.spec = spec
        self.scheme = scheme
        self.word = Embed(spec.vocab_size, e, ("vocab", "embed"), rngs=rngs)
        self.token_type = (
            Embed(spec.type_vocab_size, e, (None, "embed"), rngs=rngs)
            if spec.type_vocab_size > 0
            else None
        )
        self.position = (
            HookParams(scheme.init_embed(next_key(rngs.params)))
            if scheme.embed is not None
            else None
        )
        self.norm = (layer_norm(spec, e, jnp.float32, rngs) if spec.embedding_style == "bert"
                     else None)
        # ALBERT: [e, hidden]; the input axis is left unnamed so the two axes of this kernel
        # never ask for the same mesh axis.
        self.project = (
            Dense((e,), (spec.hidden,), (None, "embed"), dtype=spec.compute_dtype, rngs=rngs,
                  init=spec.kernel_init)
            if spec.factorized
            else None
        )

    def __call__(self, batch: dict, *, deterministic: bool, rngs: Optional[nnx.Rngs],
                 word_table: Optional[jax.Array] = None):
        """word_table: the word table per batch shard (Embed.shared) when it is tied."""
        ids = batch["input_ids"]
        x = self.word(ids, word_table)
        if self.norm is None:  # 'scaled'
            x = x * jnp.sqrt(jnp.float32(x.shape[-1]))
        if self.position is not None:
            x = self.scheme.embed(self.position.value(), x, batch["positions"], ids)
        if self.token_type is not None:
            x = x + self.token_type(batch["token_type_ids"])
        if self.norm is not None:
            x = self.norm(x)
        if self.norm is not None or self.position is not None:
            x = dropout(x, self.spec.dropout, deterministic, rngs)
        x = x.astype(self.spec.compute_dtype)
        if self.project is not None:
            x = self.project(x)
        return constrain(x, BLE)


class Encoder(nnx.Module):
    """Embeddings and num_layers Transformer layers -> hidden states [B, L, hidden] (with an
    enhanced mask decoder, scheme.decoder_passes() > 0: the decoder's output)."""

    def __init__(self, spec: ModelSpec, scheme: Any, *, rngs: nnx.Rngs):
        """`scheme` is bound to the model's dims (PretrainingModel binds it)."""
        self.spec = spec
        self.scheme = scheme
        self.embeddings = Embeddings(spec, scheme, rngs=rngs)
        # One set of hook params for all layers (T5's shared bias, TUPE) lives here.
        self.shared_hook = (
            HookParams(scheme.init_layer(next_key(rngs.params))) if scheme.share_layers else None
        )
        if spec.share_layers:  # ALBERT: one layer's parameters, applied num_layers times
            self.layers = nnx.List([TransformerLayer(spec, scheme, rngs=rngs)])
        else:
            # Local / global / NoPE layers (layout.py; validation checked the settings). With
            # the defaults every layer is global with `scheme`: the plain stack.
            local = layout.local_scheme(scheme, spec.local_position)
            kinds = layout.plan(spec.num_layers, spec.max_length, window=spec.local_window,
                                global_every=spec.global_every, global_first=spec.global_first,
                                nope_every=spec.nope_every)
            self.layers = nnx.List([
                TransformerLayer(spec, layout.layer_scheme(kind, scheme, local), window=kind.window,
                                 attention_norm=i > 0 or spec.first_attention_norm, rngs=rngs)
                for i, kind in enumerate(kinds)])
        # DeBERTa's enhanced mask decoder: its absolute table (scheme.init_decoder).
        self.decoder = (HookParams(scheme.init_decoder(next_key(rngs.params)))
                        if scheme.decoder_passes() else None)
        self.final_norm = (
            None
            if spec.post_ln
            else layer_norm(spec, spec.hidden, spec.compute_dtype, rngs)
        )

    def __call__(
        self, batch: dict, *, deterministic: bool = True, rngs: Optional[nnx.Rngs] = None,
        dense_rows: bool = False, word_table: Optional[jax.Array] = None,
    ) -> jax.Array:
        """dense_rows: the caller guarantees every row is one example without padding
        (segment_ids all 1), so attention builds and applies no mask at all. A static
        promise from whoever made the batch (never inferred from the data under jit).
        word_table: the word table per batch shard, shared with the tied head (Embed.shared)."""
        x = self.embeddings(batch, deterministic=deterministic, rngs=rngs, word_table=word_table)
        batch = dict(batch, attention=self.attention_inputs(batch, dense_rows))
        shared = self.shared_hook.value() if self.shared_hook is not None else None
        kw = dict(shared_hook=shared, deterministic=deterministic, rngs=rngs)
        passes = self.scheme.decoder_passes()

        def layer_call(layer, x, batch, shared, rngs):
            return layer(x, batch, shared_hook=shared, deterministic=deterministic, rngs=rngs)

        call = remat.rematerialized(layer_call, self.spec.remat)
        per_layer = batch.get("layer_positions")  # [B, num_layers, L] or None
        for i in range(self.spec.num_layers - (1 if passes else 0)):
            layer_batch = batch if per_layer is None else dict(batch, positions=per_layer[:, i])
            x = call(self.layers[0 if self.spec.share_layers else i], x, layer_batch, shared,
                     rngs)
        if passes:
            # Enhanced mask decoder: the last layer again on its own input x (keys, values),
            # queries x + absolute positions, then each pass's output; the heads read the
            # last pass (the plain last layer's output would only be discarded).
            last = self.layers[0 if self.spec.share_layers else -1]
            query = self.scheme.decoder_query(self.decoder.value(), x, batch["positions"])
            for _ in range(passes):
                query = last(x, batch, query=query, **kw)
            x = query
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x

    def attention_inputs(self, batch: dict, dense_rows: bool) -> AttentionInputs:
        """The masks of every layer, built once per forward instead of once per layer."""
        spec, pos, seg = self.spec, batch["positions"], batch["segment_ids"]
        if dense_rows:
            kv_mask, segments = None, None
        else:
            kv_mask, segments = seg > 0, (seg, seg)  # packed examples never see each other
        mask = None
        if choose_implementation(spec.attention, self.scheme, pos.shape[1],
                                 spec.logn_length) == "lean":
            mask = lean.build_mask(pos, pos, kv_mask, segments, spec.causal)
        return AttentionInputs(kv_mask, segments, mask)
