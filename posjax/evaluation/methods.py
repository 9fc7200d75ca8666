"""Extension methods: which ones apply to which model, and how each rewrites config / params.

A METHOD is a way to run a trained model at a length L it may not have been trained at
(T = the training length, data.seq_len of the run). Two belong to the evaluation protocol
and apply to every model:

  as_is         the model unchanged (for RoPE: scaling 'none'; alias 'none'). A learned table
                supports only as many positions as it has rows; past that the cell is
                'not_applicable'.
  truncate      context limited to the trained length: the L-token row is cut into
                consecutive windows of T tokens, each window attends only to itself
                (segment ids) and its positions restart at 0 (position p of the row is
                position p mod T of its window). Every token of the row is still scored, with
                the same masks as the other methods; only the context is cut. Windows after
                the first start mid-text and have no [CLS].

The others belong to schemes: each scheme class lists its own in `extend_methods` and builds
them in `extend` (learned tables: hierarchical, tile, interpolate, stretch, new_rows in
posjax/positions/absolute.py; RoPE: its post-hoc scalings, rerope, leaky_rerope in
posjax/positions/rotary.py). `python -m posjax list` prints every method with one line and the
schemes it applies to. --alphas, --rope_factor, --rerope_window and --leaky_factor reach them
as ExtendSettings. Any method can run `+logn` (attention logits times log(n)/log(T)); truncate
never does (its windows hold T keys, where the factor is 1).

`make_cell(run, variant, length, options)` returns a Cell (eval config + params rewrite) or
raises NotApplicable with the reason (recorded in the results, never a crash).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, Callable, Optional

import jax
import ml_collections

from posjax import attention, positions, schema
from posjax.errors import ConfigError

# Methods of the evaluation protocol itself (every scheme takes them); the rest are the
# schemes' own length extensions (`extend_methods` at each scheme class).
TRUNCATE = "truncate"
PROTOCOL = {
    TRUNCATE: "context cut to windows of the trained length T, positions restarting at 0",
}
ALIASES = positions.ALIASES


def method_docs() -> dict:
    """Every method ('as_is', the protocol's, then the registered schemes') with one line."""
    return {positions.AS_IS: positions.AS_IS_DOC, **PROTOCOL, **positions.extension_methods()}


def method_names() -> tuple:
    return tuple(method_docs())


def __getattr__(name: str):
    # `METHODS` follows the registry: a scheme registered after this import adds its methods.
    if name == "METHODS":
        return method_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Above this many tokens the evaluator forces a blocked attention path on CPU (rows, or
# chunked for causal models: posjax.attention.blocked_path): O(L * block) memory.
CHUNKED_ABOVE = 512

NotApplicable = positions.NotApplicable  # this method cannot run this model at this length


@dataclasses.dataclass(frozen=True)
class Options:
    """Sweep-wide settings that shape the methods."""

    rope_factor: Optional[float] = None  # None = per length, max(1, L/T)
    rerope_window: Optional[int] = None  # None = T // 2
    leaky_factor: Optional[float] = None  # None = max(2, (L-w)/(T-w))
    force_chunked: bool = True  # on CPU above CHUNKED_ABOVE tokens


@dataclasses.dataclass(frozen=True)
class Variant:
    """A method plus its parameters (e.g. alpha) and whether log-n scaling is on."""

    method: str
    alpha: Optional[float] = None
    logn: bool = False
    shuffle: bool = False  # position ids permuted within each row (position reliance)

    @property
    def params(self) -> dict:
        out = {}
        if self.alpha is not None:
            out["alpha"] = self.alpha
        if self.logn:
            out["logn"] = True
        if self.shuffle:
            out["shuffle_positions"] = True
        return out

    @property
    def label(self) -> str:
        name = self.method
        if self.alpha is not None:
            name += f"(alpha={self.alpha:g})"
        return name + ("+logn" if self.logn else "") + (" shuffled" if self.shuffle else "")

    def key(self) -> str:
        return self.method + json.dumps(self.params, sort_keys=True)


@dataclasses.dataclass
class Cell:
    """What the sweep needs to evaluate one (run, variant, length)."""

    config: ml_collections.ConfigDict  # eval config: position/model rewritten, seq_len = L
    rewrite: Callable[[Any], Any]  # checkpoint params -> params of the eval model
    window: Optional[int]  # truncate: window length; None = one full-length example
    details: dict  # resolved settings (factor, window, rows, ...) for the results


def canonical(method: str) -> str:
    return ALIASES.get(method, method)


def applies(method: str, scheme: str) -> bool:
    """Whether `method` fits a model trained with position `scheme` (ignoring length)."""
    method = canonical(method)
    if method not in method_names() or scheme not in positions.names():
        return False
    return method in PROTOCOL or method in positions.scheme_class(scheme).offered_methods()


def why_not(method: str, scheme: str) -> str:
    method = canonical(method)
    owner = positions.method_owner(method)
    if owner is None:
        return f"unknown method '{method}'"
    return owner.extend_refusal.format(method=method, scheme=scheme)


def fitting(scheme: str) -> list[str]:
    """Every method that applies to a model trained with position `scheme`."""
    return [m for m in method_names() if applies(m, scheme)]


def default_methods(scheme: str) -> list[str]:
    """'as_is' and the scheme's own methods; a bounded scheme (a table) with methods is also
    compared against cutting the context to the trained length."""
    cls = positions.scheme_class(scheme)
    own = list(cls.offered_methods())
    return own[:1] + ([TRUNCATE] if cls.bounded and cls.extend_methods else []) + own[1:]


def check_methods(methods: list[str], field: str = "methods") -> list[str]:
    out, known = [], method_names()
    for m in methods:
        if canonical(m) not in known:
            raise ConfigError(field, m, positions.suggest(m, known) + " (or 'none' = as_is)")
        if canonical(m) not in out:
            out.append(canonical(m))
    return out


def variants(methods: list[str], scheme: str, *, alphas: list[float], logn: bool,
             trained_logn: bool = False) -> list[Variant]:
    """The variants to run for one model: hierarchical once per alpha, +logn doubles
    every method but truncate (and is skipped when the model was trained with log-n)."""
    out = []
    for m in methods:
        base = [Variant(m, alpha=a) for a in alphas] if m == "hierarchical" else [Variant(m)]
        for v in base:
            out.append(v)
            if logn and not trained_logn and m != TRUNCATE:
                out.append(dataclasses.replace(v, logn=True))
    return out


def _copy(config) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(copy.deepcopy(config.to_dict()))


def make_cell(run, variant: Variant, length: int, options: Options = Options()) -> Cell:
    """The eval config and params rewrite for `variant` at `length`, or NotApplicable: the
    scheme's own extension (`Scheme.extend`), truncate's windows, log-n, the longer length."""
    from posjax import models

    method, scheme, T = canonical(variant.method), run.scheme, run.trained_length
    if not applies(method, scheme):
        raise NotApplicable(why_not(method, scheme))
    cfg = _copy(run.config)
    bound = models.extension.bound_scheme(cfg)
    details: dict = {}
    window = None
    if method == TRUNCATE:
        if bound.position_dims != 1:
            raise NotApplicable("truncate cuts rows into 1-D windows; this model reads "
                                "(row, column) positions")
        window = T
        details["window"] = T
    settings = positions.ExtendSettings(alpha=variant.alpha, factor=options.rope_factor,
                                        window=options.rerope_window,
                                        leaky_factor=options.leaky_factor)
    extension = bound.extend("as_is" if method == TRUNCATE else method, length, T, settings)
    details.update(extension.details)
    # transformers' ModernBERT config copies a legacy rope_scaling to both layer types;
    # posjax scales the global layers only (layout.keep_local_rotation says why)
    if models.extension.apply(cfg, extension):
        details["local_layers"] = "unscaled"

    if variant.logn:
        cfg.model.logn_length = T
        details["logn_length"] = T
    if window is None:
        cfg.model.max_length = max(int(cfg.model.max_length), length)
        cfg.data.seq_len = length
    else:  # truncate: positions stay below the window; the model keeps its trained size
        cfg.data.seq_len = min(length, window)
    if (options.force_chunked and length > CHUNKED_ABOVE and jax.default_backend() == "cpu"
            and schema.view(cfg).model.attention in ("auto", "reference")):
        cfg.model.attention = attention.blocked_path(bool(schema.view(cfg).model.causal),
                                                     positions.scheme_class(cfg.position.name))
    details["attention"] = schema.view(cfg).model.attention
    try:
        models.validate_model_config(cfg, require_vocab=True)
    except ConfigError as e:
        raise NotApplicable(str(e)) from None
    return Cell(cfg, lambda params: models.extension.rewrite_params(params, extension), window,
                details)


def check_shapes(abstract: Any, params: Any, scheme: str, length: int, max_length: int) -> None:
    """NotApplicable when the eval model's parameter shapes differ from the checkpoint's (a
    scheme that sizes a table by model.max_length, run past it)."""
    got = jax.tree.map(lambda x: tuple(x.shape), params)
    want = jax.tree.map(lambda x: tuple(x.shape), abstract)
    if jax.tree.structure(got) != jax.tree.structure(want):
        raise NotApplicable(f"position '{scheme}' at length {length} has different parameters "
                            "than the checkpoint")
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(want), jax.tree.leaves(got)):
        if a != b:
            raise NotApplicable(
                f"position '{scheme}' sizes {jax.tree_util.keystr(path)} by model.max_length: "
                f"the checkpoint has {b}, length {length} needs {a} (trained max_length "
                f"{max_length}; retrain with a larger model.max_length)")
