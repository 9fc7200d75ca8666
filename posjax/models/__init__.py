"""Flax NNX models: one encoder stack for BERT / NEZHA / RoFormer / ALBERT options and every
registered position scheme, BERT's tied MLM head, ALBERT's SOP head, and the causal-LM variant.

Public API (train.py, training/ and evaluation/ rely on these exact names):
  validate_model_config(config) -> ModelSpec   raises ConfigError naming the field
  model_dims(config) -> posjax.positions.Dims
  build_model(config, rngs) -> MaskedLM | CausalLM | TapeModel (model.output_classes)
  model(batch, *, deterministic=True, rngs=None) -> {'mlm_logits' | 'lm_logits', 'hidden',
                                                      'sop_logits' (with model.sop)}
  constrain(x, logical_names)                  sharding constraint, identity without a mesh
  extension.apply / rewrite_params             a scheme's length extension on config / params
"""

from posjax.models import extension
from posjax.models.partitioning import constrain
from posjax.models.pretraining import (
    CausalLM,
    MaskedLM,
    PretrainingModel,
    build_model,
    count_params,
)
from posjax.models.spec import ModelSpec, model_dims, validate_model_config
from posjax.models.tape_model import TapeModel

__all__ = [
    "CausalLM",
    "MaskedLM",
    "ModelSpec",
    "PretrainingModel",
    "TapeModel",
    "build_model",
    "constrain",
    "count_params",
    "extension",
    "model_dims",
    "validate_model_config",
]
