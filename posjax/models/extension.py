"""A scheme's Extension (positions/extension.py) applied to a model config and a checkpoint's
params: the one place that knows where the position config and the embed params live, shared
by eval.py's methods (posjax.evaluation.methods) and Pretrained.extend."""

from __future__ import annotations

from typing import Any

import ml_collections

from posjax import positions
from posjax.models import layout
from posjax.models.spec import model_dims

# Where a model keeps its scheme's embed params (`init_embed`) in a pure params dict.
EMBED_PARAMS = ("encoder", "embeddings", "position", "tree")


def bound_scheme(config) -> positions.Scheme:
    """The scheme of `config`, bound to its model's dims."""
    return positions.make(config.position).bind(model_dims(config))


def apply(config, extension: positions.Extension) -> bool:
    """Set the extension's position fields on `config` (in place). True when the model has
    local layers that keep their trained positions (a global-only change)."""
    config.position = ml_collections.ConfigDict(
        extension.position_config(config.position.to_dict()))
    return extension.global_only and layout.keep_local_rotation(config.model)


def rewrite_params(params: Any, extension: positions.Extension) -> Any:
    """`params` with the scheme's embed params rewritten (a shallow copy along the path), or
    `params` itself when the extension keeps them."""
    if extension.embed_rewrite is None:
        return params
    out = dict(params)
    node = out
    for key in EMBED_PARAMS[:-1]:
        node[key] = dict(node[key])
        node = node[key]
    node[EMBED_PARAMS[-1]] = extension.embed_rewrite(node[EMBED_PARAMS[-1]])
    return out
