"""LAMB the way BERT trains with it, plus the learning-rate schedule.

Why not `optax.lamb`: it applies weight decay through a mask but the trust ratio to EVERY
leaf. BERT's LAMB (google-research/bert `optimization.py`, and NVIDIA's LAMB) excludes
LayerNorm parameters and all biases from BOTH weight decay and layer adaptation. A trust
ratio on a LayerNorm scale (norm ~ sqrt(width)) or a zero-initialised bias (norm 0 ->
ratio 1, then tiny) distorts those updates, so we build the chain ourselves:

    clip_by_global_norm -> scale_by_adam -> add_decayed_weights(mask)
      -> layerwise trust ratio(mask, per-layer slices) -> scale_by_learning_rate(schedule)

Which leaves are excluded is decided by regexes over the parameter path ("a/b/0/c"),
big_vision style (`config.train.no_decay`, a list of regexes; defaults below).

Stacked layers: if a leaf carries the logical axis name 'layers' (a scanned stack of layers
in one array), the trust ratio is computed per layer slice along that axis, never over the
whole stack (a whole-leaf norm mixes layers). posjax's models keep one leaf per layer today
(no scan), so every trust ratio is simply per leaf; the per-slice path is tested directly.
"""

from __future__ import annotations

import re
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import optax

from posjax import schema
from posjax.errors import ConfigError
from posjax.positions import scheme_class

# BERT: exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]. In posjax paths a
# LayerNorm's leaves are ".../<something with norm or ln>/scale|bias"; every bias is excluded.
DEFAULT_NO_DECAY = (
    r"(^|.*/)bias$",
    r"(^|.*/)[^/]*(norm|ln)[^/]*/(scale|bias)$",
    r"(^|.*/)sinks$",  # learned attention sink logits (model.attention_sinks): per-head offsets
    # rope2d mode='mixed' learned rotation frequencies [2, H, D/2]: Heo et al. 2024's code
    # (naver-ai/rope-vit, deit/models_v2_rope.py) lists 'freqs' in no_weight_decay(), with
    # pos_embed and cls_token (decay would pull every frequency towards 0, i.e. towards
    # ignoring position). They train with AdamW; out of the mask here, the frequencies get
    # the same plain Adam step (no decay, no trust ratio), as BERT's excluded leaves do.
    r"(^|.*/)freqs$",
)


def path_str(path: Sequence[Any]) -> str:
    """'a/b/0/c' for a jax key path (DictKey, SequenceKey, GetAttrKey ...)."""
    parts = []
    for k in path:
        for attr in ("key", "idx", "name"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def tree_paths(tree) -> Any:
    """A tree of the same structure whose leaves are the leaves' path strings."""
    return jax.tree_util.tree_map_with_path(lambda p, _: path_str(p), tree)


def position_patterns(position) -> tuple[str, ...]:
    """Regexes of the position scheme's own excluded leaves (Scheme.no_decay: zero-initialised
    parameters, which a trust ratio would hold at zero, and its LayerNorm parameters) in its
    parameter tree, "<...>/tree/<name>"."""
    names = scheme_class(position["name"]).no_decay
    return tuple(rf"(^|.*/)tree/{re.escape(name)}$" for name in names)


def decay_mask(params, patterns: Sequence[str] = DEFAULT_NO_DECAY):
    """True for leaves that get weight decay and a trust ratio (no pattern matches them)."""
    compiled = [re.compile(p, re.IGNORECASE) for p in patterns]
    return jax.tree.map(
        lambda path: not any(c.fullmatch(path) for c in compiled), tree_paths(params))


SCHEDULES = schema.SCHEDULES


def warmup_linear_decay(train) -> Callable[[jax.Array], jax.Array]:
    """BERT schedule: linear warmup 0 -> learning_rate over warmup_steps, then linear to 0 at steps.

    lr(t) = lr * min(t / warmup, 1) * clip((steps - t) / (steps - warmup), 0, 1).
    train.schedule='constant' drops the decay (lr after warmup), so checkpoints of one run
    differ in steps only, not in learning rate (continued training:
    posjax.evaluation.run.continued).
    """
    train = schema.section_view(train, "train")
    kind = schema.check_value("train.schedule", train.schedule)
    steps, warmup = schema.check_warmup(train)
    lr = float(schema.check_value("train.learning_rate", train.learning_rate))

    def schedule(count):
        t = jnp.asarray(count, jnp.float32)
        up = jnp.minimum(t / max(warmup, 1), 1.0) if warmup > 0 else 1.0
        if kind == "constant":
            return lr * up * jnp.ones_like(t)
        down = jnp.clip((steps - t) / (steps - warmup), 0.0, 1.0)
        return lr * up * down

    return schedule


class TrustRatioState(NamedTuple):
    pass


def scale_by_layerwise_trust_ratio(
    mask, layer_axes, min_norm: float = 0.0
) -> optax.GradientTransformation:
    """LAMB's layer adaptation u <- u * ||p|| / ||u|| on leaves where `mask` is True.

    `mask` is a tree of bools shaped like the params. `layer_axes` is a tree of ints shaped
    like the params: -1 for an ordinary leaf, else the axis that indexes stacked layers (the
    norms are then taken per slice along it). Where either norm is 0 the ratio is 1 (optax and
    BERT do the same), so zero-initialised weights can start moving.
    """
    flat_mask = jax.tree.leaves(mask)
    flat_axes = jax.tree.leaves(layer_axes)

    def init_fn(params):
        del params
        return TrustRatioState()

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_layerwise_trust_ratio needs params")
        u_leaves, treedef = jax.tree.flatten(updates)
        p_leaves = treedef.flatten_up_to(params)
        out = [
            _trust_scale(u, p, axis, min_norm) if use else u
            for u, p, use, axis in zip(u_leaves, p_leaves, flat_mask, flat_axes)
        ]
        return jax.tree.unflatten(treedef, out), state

    return optax.GradientTransformation(init_fn, update_fn)


def _trust_scale(u, p, axis: int, min_norm: float):
    reduce = None if axis < 0 else tuple(a for a in range(u.ndim) if a != axis)
    pn = jnp.sqrt(jnp.sum(jnp.square(p.astype(jnp.float32)), axis=reduce, keepdims=True))
    un = jnp.sqrt(jnp.sum(jnp.square(u.astype(jnp.float32)), axis=reduce, keepdims=True))
    ok = (pn > min_norm) & (un > 0)
    ratio = jnp.where(ok, pn / jnp.where(un > 0, un, 1.0), 1.0)
    return (u * ratio).astype(u.dtype)


def layer_axes_from_specs(logical_specs) -> Any:
    """Per leaf: the index of the 'layers' logical axis, or -1 (the leaf is one layer)."""

    def axis(spec):
        names = tuple(spec) if spec is not None else ()
        return names.index("layers") if "layers" in names else -1

    return jax.tree.map(
        axis, logical_specs,
        is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec) or x is None)


def make_optimizer(train, params, logical_specs=None, position=None
                   ) -> tuple[optax.GradientTransformation, Callable]:
    """The LAMB chain for `params` (a pure dict or its abstract shapes) and its schedule.

    Returns (optimizer, schedule). `logical_specs` (tree of PartitionSpec with logical names,
    same structure as params) is only used to find stacked-layer axes. `position` (the
    config's position section) adds its scheme's excluded leaves (position_patterns) to
    train.no_decay or the defaults.
    """
    schedule = warmup_linear_decay(train)
    train = schema.section_view(train, "train")
    patterns = tuple(train.no_decay or DEFAULT_NO_DECAY)
    if position is not None:
        patterns += position_patterns(position)
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            raise ConfigError("train.no_decay", p, f"valid regular expressions ({e})") from None
    mask = decay_mask(params, patterns)
    if logical_specs is None:
        axes = jax.tree.map(lambda _: -1, params)
    else:
        axes = layer_axes_from_specs(logical_specs)
    clip = schema.check_value("train.clip_norm", train.clip_norm)
    wd = float(schema.check_value("train.weight_decay", train.weight_decay))
    parts = []
    if clip:
        parts.append(optax.clip_by_global_norm(float(clip)))
    parts += [
        optax.scale_by_adam(b1=float(train.b1), b2=float(train.b2), eps=float(train.eps)),
        optax.add_decayed_weights(wd, mask=mask),
        scale_by_layerwise_trust_ratio(mask, axes),
        optax.scale_by_learning_rate(schedule),
    ]
    return optax.chain(*parts), schedule
