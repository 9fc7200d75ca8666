"""Extension methods: which ones apply to which model, and how each rewrites config / params.

A METHOD is a way to run a trained model at a length L it may not have been trained at
(T = the training length, data.seq_len of the run):

  as_is         the model unchanged (for RoPE: scaling 'none'; alias 'none'). A learned table
                supports only as many positions as it has rows; past that the cell is
                'not_applicable'.
  truncate      context limited to the trained length: the L-token row is cut into
                consecutive windows of T tokens, each window attends only to itself
                (segment ids) and its positions restart at 0 (position p of the row is
                position p mod T of its window). Every token of the row is still scored, with
                the same masks as the other methods; only the context is cut. Windows after
                the first start mid-text and have no [CLS].
  hierarchical  (learned tables) Su's decomposition of the first n = min(T, table rows) rows
                of the trained table, alpha from --alphas: reaches n*n positions and gives
                exactly the table's rows below n.
  tile, interpolate, stretch, new_rows
                (learned tables) the first n = min(T, table rows) rows extended to a table of
                L rows (posjax.evaluation.tables defines each exactly); for L <= n they are
                the model as it is.
  linear, ntk, dynamic_ntk, yarn, llama3
                (RoPE) position interpolation / NTK-aware base / dynamic NTK / YaRN / Llama 3.1
                (default edges L/1 and L/4) with original_length = T. Factor: by default s = max(1, L/T) per length (dynamic
                NTK uses factor 1, i.e. base * (n/T)**(d/(d-2)) from the running length n,
                so at full-length rows it coincides with ntk); --rope_factor fixes s instead.
                On a model with local (sliding-window) layers only the global layers are
                scaled; the local ones keep their trained rotation.
  rerope, leaky_rerope
                (RoPE) plain RoPE within `window` (default T//2), relative positions clamped
                (leaky: squashed by 1/k, k = max(2, (L-w)/(T-w)) so distance L-1 maps below T).
Any method can run `+logn` (attention logits times log(n)/log(T)); truncate never does (its
windows hold T keys, where the factor is 1).

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

from posjax import attention
from posjax.data import patches
from posjax.errors import ConfigError
from posjax.evaluation import tables
from posjax.models import layout

LEARNED = ("learned", "hierarchical")  # schemes whose table the hierarchical method reuses
TABLE_SCHEMES = ("learned", "hierarchical", "multiplicative")  # rows default to max_length
# longrope needs per-dim factors searched for the model and proportional (p-RoPE) is a
# training-time choice of dropped frequencies: neither is a post-hoc method.
ROPE_SCALINGS = ("linear", "ntk", "dynamic_ntk", "yarn", "llama3")
ROPE_METHODS = ROPE_SCALINGS + ("rerope", "leaky_rerope")
TABLE_METHODS = tables.TABLE_METHODS
METHODS = ("as_is", "truncate", "hierarchical") + TABLE_METHODS + ROPE_METHODS
ALIASES = {"none": "as_is"}
TABLE_PATH = ("encoder", "embeddings", "position", "tree", "table")

# Above this many tokens the evaluator forces a blocked attention path on CPU (rows, or
# chunked for causal models: posjax.attention.blocked_path): O(L * block) memory.
CHUNKED_ABOVE = 512


class NotApplicable(Exception):
    """This method cannot run this model at this length; the message says why."""


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
    if method in ("as_is", "truncate"):
        return True
    if method == "hierarchical" or method in TABLE_METHODS:
        return scheme in LEARNED
    if method in ROPE_METHODS:
        return scheme == "rope"
    return False


def why_not(method: str, scheme: str) -> str:
    method = canonical(method)
    if method == "hierarchical" or method in TABLE_METHODS:
        return f"{method} extends a learned table; position '{scheme}' has none"
    if method in ROPE_METHODS:
        return f"'{method}' rescales rotary positions; position '{scheme}' is not 'rope'"
    return f"unknown method '{method}'"


def fitting(scheme: str) -> list[str]:
    """Every method that applies to a model trained with position `scheme`."""
    return [m for m in METHODS if applies(m, scheme)]


def default_methods(scheme: str) -> list[str]:
    if scheme in LEARNED:
        return ["as_is", "truncate", "hierarchical", *TABLE_METHODS]
    if scheme == "rope":
        return ["as_is", *ROPE_METHODS]
    return ["as_is"]


def check_methods(methods: list[str], field: str = "methods") -> list[str]:
    out = []
    for m in methods:
        if canonical(m) not in METHODS:
            raise ConfigError(field, m, f"one of {', '.join(METHODS)} (or 'none' = as_is)")
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
            if logn and not trained_logn and m != "truncate":
                out.append(dataclasses.replace(v, logn=True))
    return out


# -- config / params rewrites -------------------------------------------------------------------


def _copy(config) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(copy.deepcopy(config.to_dict()))


def _table_rows(config) -> int:
    rows = config.position.get("rows", None)
    return int(rows) if rows is not None else int(config.model.max_length)


def slice_table(params: Any, rows: int) -> Any:
    """params with the learned position table cut to its first `rows` rows (a shallow copy)."""
    return replace_table(params, lambda table: table[:rows])


def replace_table(params: Any, fn: Callable[[Any], Any]) -> Any:
    """params with the learned position table replaced by fn(table) (a shallow copy)."""
    out = dict(params)
    node, parents = out, []
    for key in TABLE_PATH[:-1]:
        child = dict(node[key])
        node[key] = child
        parents.append(node)
        node = child
    node[TABLE_PATH[-1]] = fn(node[TABLE_PATH[-1]])
    return out


def make_cell(run, variant: Variant, length: int, options: Options = Options()) -> Cell:
    """The eval config and params rewrite for `variant` at `length`, or NotApplicable."""
    from posjax import models

    method, scheme, T = variant.method, run.scheme, run.trained_length
    if not applies(method, scheme):
        raise NotApplicable(why_not(method, scheme))
    cfg = _copy(run.config)
    details: dict = {}
    rewrite: Callable[[Any], Any] = lambda p: p  # noqa: E731
    window = None
    pos = cfg.position
    if scheme in TABLE_SCHEMES and pos.get("rows", None) is None:
        pos.rows = int(cfg.model.max_length)  # the table keeps its trained shape

    if method == "truncate":
        if patches.is_patches(cfg) and patches.grid_positions(cfg):
            raise NotApplicable("truncate cuts rows into 1-D windows; this model reads "
                                "(row, column) positions")
        window = T
        details["window"] = T
    elif method == "hierarchical":
        rows = min(T, _table_rows(run.config))
        alpha = 0.4 if variant.alpha is None else float(variant.alpha)
        if length > rows * rows:
            raise NotApplicable(f"hierarchical on {rows} rows reaches {rows * rows} positions "
                                f"< {length}")
        cfg.position = ml_collections.ConfigDict({"name": "hierarchical", "rows": rows,
                                                  "alpha": alpha})
        if rows < _table_rows(run.config):
            rewrite = lambda p: slice_table(p, rows)  # noqa: E731
        details.update(rows=rows, alpha=alpha)
    elif method in TABLE_METHODS:
        rows = min(T, _table_rows(run.config))
        details["rows"] = rows
        if length > rows:
            cfg.position = ml_collections.ConfigDict({"name": "learned", "rows": int(length)})

            def rewrite(p, method=method, rows=rows):
                return replace_table(p, lambda t: jax.numpy.asarray(
                    tables.extend(jax.device_get(t)[:rows], length, method)))
    elif method in ROPE_SCALINGS:
        s = options.rope_factor if options.rope_factor else max(1.0, length / T)
        if method == "dynamic_ntk" and not options.rope_factor:
            s = 1.0
        pos.scaling, pos.factor = method, float(s)
        if method in ("dynamic_ntk", "yarn", "llama3"):
            pos.original_length = T
        details.update(factor=float(s), original_length=T)
        # transformers' ModernBERT config copies a legacy rope_scaling to both layer types;
        # posjax scales the global layers only (layout.keep_local_rotation says why)
        if layout.keep_local_rotation(cfg.model):
            details["local_layers"] = "unscaled"
    elif method in ("rerope", "leaky_rerope"):
        if pos.get("rotary_dim", None) is not None or pos.get("rotary_fraction", None) is not None:
            raise NotApplicable(f"{method} rotates every dim; this model rotates only part of them")
        if pos.get("on_values", False):
            raise NotApplicable(f"{method} does not rotate values; this model does (on_values=True)")
        w = options.rerope_window or max(1, T // 2)
        fields = {"name": method, "window": int(w), "base": float(pos.get("base", 10000.0)),
                  "interleaved": bool(pos.get("interleaved", True))}
        if method == "leaky_rerope":
            k = options.leaky_factor or max(2.0, (length - w) / max(T - w, 1))
            fields["leaky_factor"] = float(k)
            details["leaky_factor"] = float(k)
        cfg.position = ml_collections.ConfigDict(fields)
        details["window"] = int(w)

    if variant.logn:
        cfg.model.logn_length = T
        details["logn_length"] = T
    if window is None:
        cfg.model.max_length = max(int(cfg.model.max_length), length)
        cfg.data.seq_len = length
    else:  # truncate: positions stay below the window; the model keeps its trained size
        cfg.data.seq_len = min(length, window)
    if (options.force_chunked and length > CHUNKED_ABOVE and jax.default_backend() == "cpu"
            and cfg.model.get("attention", "auto") in ("auto", "reference")):
        cfg.model.attention = attention.blocked_path(bool(cfg.model.get("causal", False)))
    details["attention"] = cfg.model.get("attention", "auto")
    try:
        models.validate_model_config(cfg, require_vocab=True)
    except ConfigError as e:
        raise NotApplicable(str(e)) from None
    return Cell(cfg, rewrite, window, details)


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
