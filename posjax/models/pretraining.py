"""Pretraining models (encoder + tied LM head [+ SOP head]) and `build_model`.

The forward pass returns logits only; losses live in posjax.training.

    model = build_model(config, nnx.Rngs(params=0))
    out = model(batch, deterministic=False, rngs=nnx.Rngs(dropout=1))
    out["mlm_logits"]  # [B, L, V] float32  (MaskedLM), or [B, P, V] at batch["mlm_positions"]
    out["lm_logits"]   # [B, L, V] float32  (CausalLM): position t predicts input_ids[t + 1]
    out["hidden"]      # [B, L, hidden] compute dtype
    out["sop_logits"]  # [B, 2] float32, only with config.model.sop
"""

from __future__ import annotations

from typing import Any, Union

import jax
import jax.numpy as jnp
from flax import nnx

from posjax import positions
from posjax.models.encoder import Encoder, as_rngs, encoder_inputs
from posjax.models.heads import LMHead, SopHead
from posjax.models.spec import ModelSpec, model_dims, validate_model_config
from posjax.models.tape_model import TapeModel



class PretrainingModel(nnx.Module):
    """Encoder + tied LM head (+ SOP head). Subclasses name their logits."""

    logits_key = "logits"

    def __init__(self, spec: ModelSpec, scheme: positions.Scheme, dims: positions.Dims,
                 *, rngs: nnx.Rngs):
        self.spec = spec
        self.scheme = scheme.bind(dims)  # the one bind: every module below gets this scheme
        self.dims = dims
        self.encoder = Encoder(spec, self.scheme, rngs=rngs)
        self.lm_head = LMHead(spec, rngs=rngs)
        self.sop_head = SopHead(spec, rngs=rngs) if spec.sop else None

    def __call__(
        self,
        batch: dict,
        *,
        deterministic: bool = True,
        rngs: Union[None, nnx.Rngs, jax.Array] = None,
        dense_rows: bool = False,
    ) -> dict:
        """dense_rows: every row is one example without padding (see Encoder)."""
        predict_at = batch.get("mlm_positions") if self.logits_key == "mlm_logits" else None
        batch = encoder_inputs(batch, self.spec, "the batch contract in posjax.data")
        rngs = as_rngs(rngs)
        # The tied table once, per batch shard under a mesh, for the lookup and the head: its
        # two gradient parts add on each device before one collective (Embed.shared).
        word = self.encoder.embeddings.word
        shared = word.shared(batch["input_ids"].shape[0])
        h = self.encoder(batch, deterministic=deterministic, rngs=rngs, dense_rows=dense_rows,
                         word_table=shared)
        out = {"hidden": h}
        if self.sop_head is not None:
            out["sop_logits"] = self.sop_head(h)  # pools [CLS]: the full sequence, not a gather
        if predict_at is not None:
            # BERT's gather_indexes: the head (and its vocab-sized matmul, the largest one of a
            # small model) runs only where a prediction is scored.
            predict_at = jnp.asarray(predict_at, jnp.int32)
            h = jnp.take_along_axis(h, predict_at[..., None], axis=1)
            out["mlm_positions"] = predict_at
        out[self.logits_key] = self.lm_head(h, word, shared)
        return out


class MaskedLM(PretrainingModel):
    """Bidirectional encoder with BERT's MLM head: 'mlm_logits' at every position, or only at
    batch['mlm_positions'] [B, P] (int32) when the batch carries them (the training step does,
    see posjax.training.losses.prediction_positions)."""

    logits_key = "mlm_logits"


class CausalLM(PretrainingModel):
    """The same stack with a causal mask. 'lm_logits'[:, t] predicts input_ids[:, t + 1]
    (no shift inside the model; the loss shifts targets, and the last position of each packed
    example has no target)."""

    logits_key = "lm_logits"


def build_model(config: Any, rngs: nnx.Rngs) -> Union[PretrainingModel, TapeModel]:
    """Validate config.model + config.position (+ data.seq_len), then build the model.

    Returns MaskedLM for config.model.causal=False, CausalLM for True, and TapeModel (a class
    head, posjax.models.tape_model) when config.model.output_classes is set. Every problem
    with the config raises ConfigError here, before any parameter is allocated.
    """
    spec = validate_model_config(config, require_vocab=True)
    scheme = positions.make(config.position)
    dims = model_dims(config)
    if spec.output_classes:
        return TapeModel(spec, scheme, dims, rngs=rngs)
    cls = CausalLM if spec.causal else MaskedLM
    return cls(spec, scheme, dims, rngs=rngs)


def count_params(model: nnx.Module) -> int:
    """Number of trainable scalars."""
    return sum(int(x.size) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
