"""The algorithmic tasks' model: posjax's encoder over a tape, and a per-place class head.

Delétang et al. (ICLR 2023) and Ruoss et al. (ACL 2023) read a task's input, then one "empty"
token per output place, with no mask between them, and a linear layer to the task's output
classes read at the output places (google-deepmind/randomized_positional_encodings,
experiments/utils.py `make_model_with_empty_targets`, models/transformer.py
`make_transformer`). posjax.data.tape lays the tape out; this model is the encoder of any
registered scheme plus that head:

    model = build_model(config, rngs)      # config.model.output_classes = task.output_size
    out = model(batch, deterministic=True)
    out["task_logits"]   # [B, L, output_classes] float32 at EVERY place of the tape
    out["hidden"]        # [B, L, hidden]

The head runs at every place (output_classes is a handful of classes, so the matmul is
negligible); the loss and the accuracy read only the output places (their weights are 0 on
inputs and padding: posjax.training.losses.task_loss). The call takes any tape length the
scheme supports (model.max_length for a learned table; randomized positions must stay below
it), so an evaluator can run lengths far beyond training with the same parameters.

Matching the reference (configs/algorithmic.py sets these): model.embedding_style='scaled'
(sqrt(E) * embeddings, no embedding LayerNorm), post-LN, relu, no attention biases (its
q/k/v/output projections have none; the MLP's have), model.type_vocab_size=0, LayerNorm eps
1e-5 (haiku's), dropout 0.1, haiku's Linear init (model.kernel_init='fan_in'; embeddings
stddev 0.02 as the reference's emb_init_scale). What remains different: the input symbols
use posjax's vocabulary (five special ids first, unused here, so their rows never change),
where the reference multiplies a one-hot of input_size + 1 classes by a bias-free matrix
(the same function of the used rows); the empty token is that one-hot's last class in both.
"""

from __future__ import annotations

from typing import Union

import jax
import jax.numpy as jnp
from flax import nnx

from posjax import positions
from posjax.models.encoder import Encoder, as_rngs, encoder_inputs
from posjax.models.layers import Dense
from posjax.models.partitioning import constrain
from posjax.models.spec import ModelSpec

class TapeModel(nnx.Module):
    """Encoder + a linear head (with bias) to spec.output_classes classes at every place."""

    logits_key = "task_logits"

    def __init__(self, spec: ModelSpec, scheme: positions.Scheme, dims: positions.Dims,
                 *, rngs: nnx.Rngs):
        if not spec.output_classes:
            raise ValueError("TapeModel needs spec.output_classes (model.output_classes)")
        self.spec = spec
        self.scheme = scheme.bind(dims)
        self.dims = dims
        self.encoder = Encoder(spec, self.scheme, rngs=rngs)
        self.head = Dense((spec.hidden,), (spec.output_classes,), ("embed", None),
                          dtype=spec.compute_dtype, rngs=rngs, init=spec.kernel_init)

    def __call__(
        self,
        batch: dict,
        *,
        deterministic: bool = True,
        rngs: Union[None, nnx.Rngs, jax.Array] = None,
        dense_rows: bool = False,
    ) -> dict:
        """batch: the tape in the batch contract (input_ids, positions, segment_ids; segment 0
        marks padding). dense_rows: no row has padding (see Encoder)."""
        batch = encoder_inputs(batch, self.spec, "posjax.data.tape")
        h = self.encoder(batch, deterministic=deterministic, rngs=as_rngs(rngs),
                         dense_rows=dense_rows)
        logits = self.head(h).astype(jnp.float32)
        return {"hidden": h,
                self.logits_key: constrain(logits, ("batch", "length", None))}


def output_logits(logits: jax.Array, input_length: int, output_length: int) -> jax.Array:
    """[B, output_length, C]: the logits at the output places of a tape whose inputs fill
    places 0 .. input_length-1 (posjax.data.tape's layout), what the reference's
    `output[:, -output_length:]` reads."""
    return logits[:, input_length:input_length + output_length]
