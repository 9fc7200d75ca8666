"""The config schema: every field of a training config, declared once.

Each `Field` holds a field's path, type, default, one-line doc and check. From this one table:

- `default_config()` builds the default ConfigDict (posjax.defaults adds the size variants);
- `KNOWN` lists the accepted keys of each section (posjax.validation refuses the others) and
  `nearest` picks the ones to suggest for an unknown key (validation, posjax.overrides);
- `kind(path)` types a `--config.a.b=v` override;
- `checked(config, path)` reads a field and checks it (one ConfigError line naming the field,
  the value and what is allowed); `check_all(config)` checks every field;
- `view(config)` is the read-only view code reads: every schema field present (a config saved
  before a field existed gets its default here, the one place that fills them), frozen.

config.position is not declared here: its fields are those of the dataclass of the scheme
`position.name` registers (posjax.positions), with the defaults and checks written there.
Sub-sections owned by one module (data.synthetic, data.patches, data.tasks, mesh.rules) are one
field each here; their inner keys are declared and checked by that module.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Optional

import ml_collections
from ml_collections.config_dict import placeholder

from posjax.errors import ConfigError

SECTIONS = ("model", "position", "data", "train", "mesh")
TOP_LEVEL = ("seed",) + SECTIONS

# Names whose implementations live higher up (attention, models, data); those modules use these
# tuples, and tests/test_schema.py checks that each implementation table has exactly them.
ATTENTION = ("reference", "lean", "chunked", "rows", "kernel", "auto")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")
DTYPES = ("float32", "bfloat16")
MLP_KINDS = ("dense", "glu")
CORPORA = ("peoples_daily", "kjv", "text_dir", "tfds", "synthetic", "patches")
TOKENIZERS = ("chinese_chars", "wordpiece", "patch_codes")
SCHEDULES = ("linear", "constant")
NAN_POLICIES = ("stop", "skip", "raise")  # 'raise' = 'stop' (configs/base.py used it first)
PRESETS = ("data", "fsdp", "fsdp_tp")
MIN_VOCAB = 5  # the special tokens alone: [PAD] [UNK] [CLS] [SEP] [MASK]
DEFAULT_POSITION = "learned"  # config.position.name; the scheme's dataclass has its fields


def is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))


def _int(low: int) -> Callable[[Any], bool]:
    return lambda v: is_int(v) and v >= low


def _none_or(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or ok(v)


def _one_of(choices: tuple) -> Callable[[Any], bool]:
    return lambda v: v in choices


def _bool(v) -> bool:
    return isinstance(v, bool)


def _str(v) -> bool:
    return isinstance(v, str)


def _mapping(v) -> bool:
    return v is None or hasattr(v, "items")


def _pairs(v) -> bool:
    return v is None or hasattr(v, "items") or isinstance(v, (list, tuple))


def _real_in(low: float, high: float, *, low_open: bool, high_open: bool):
    def ok(v) -> bool:
        if not is_real(v):
            return False
        above = v > low if low_open else v >= low
        below = v < high if high_open else v <= high
        return above and below
    return ok


@dataclasses.dataclass(frozen=True)
class Field:
    path: str  # 'train.steps'
    kind: type  # what an override is parsed to: int, float, bool, str, tuple or dict
    default: Any
    doc: str
    ok: Callable[[Any], bool]  # the check of the value alone (cross-field checks: validation)
    allowed: str  # what `ok` accepts, the end of the ConfigError line
    in_defaults: bool = True  # False: an optional field the default ConfigDict leaves out

    @property
    def section(self) -> str:
        return self.path.split(".", 1)[0] if "." in self.path else ""

    @property
    def key(self) -> str:
        return self.path.rsplit(".", 1)[-1]


def _f(path, kind, default, doc, ok, allowed, in_defaults=True) -> Field:
    return Field(path, kind, default, doc, ok, allowed, in_defaults)


POSITIVE = "a positive int"
TRUE_FALSE = "True or False"

FIELDS: tuple[Field, ...] = (
    _f("seed", int, 0, "the seed of parameters, dropout and data order", is_int, "an int"),
    # -- model ---------------------------------------------------------------------------------
    _f("model.vocab_size", int, None, "vocabulary size; None = filled from the tokenizer",
       _none_or(_int(MIN_VOCAB)),
       f"an int >= {MIN_VOCAB} (filled from the tokenizer before building the model)"),
    _f("model.hidden", int, 128, "model width", _int(1), POSITIVE),
    _f("model.num_layers", int, 2, "number of Transformer layers", _int(1), POSITIVE),
    _f("model.num_heads", int, 4, "attention heads per layer", _int(1), POSITIVE),
    _f("model.head_dim", int, None, "width of one head; None = hidden / num_heads",
       _none_or(_int(1)), POSITIVE),
    _f("model.mlp_dim", int, 512, "inner width of the MLP", _int(1), POSITIVE),
    _f("model.embedding_dim", int, None,
       "token embedding width; None = hidden, < hidden: ALBERT factorization",
       _none_or(_int(1)), "None or a positive int <= model.hidden"),
    _f("model.share_layers", bool, False, "one parameter set for every layer (ALBERT)",
       _bool, TRUE_FALSE),
    _f("model.post_ln", bool, True, "LayerNorm after each residual (BERT); False = pre-LN "
       "with a final LayerNorm", _bool, TRUE_FALSE),
    _f("model.causal", bool, False, "the causal-LM variant of the same stack", _bool, TRUE_FALSE),
    _f("model.type_vocab_size", int, 2, "token type embeddings; 0 = none", _int(0),
       "an int >= 0 (0 = no token type embeddings)"),
    _f("model.dropout", float, 0.1, "dropout on embeddings, attention output and MLP",
       lambda v: isinstance(v, (int, float)) and 0.0 <= v < 1.0, "a float in [0, 1)"),
    _f("model.activation", str, "gelu", "MLP activation; 'gelu' is BERT's exact erf GELU",
       _one_of(ACTIVATIONS), f"one of {', '.join(ACTIVATIONS)}"),
    _f("model.dtype", str, "float32", "compute dtype; parameters are always float32",
       _one_of(DTYPES), f"one of {', '.join(DTYPES)}"),
    _f("model.layer_norm_eps", float, 1e-12, "LayerNorm epsilon",
       lambda v: isinstance(v, float) and v > 0, "a float > 0"),
    _f("model.max_length", int, 512,
       "largest position + 1 the model supports (learned table rows)", _int(1), POSITIVE),
    _f("model.attention", str, "auto", "attention implementation (posjax.attention)",
       _one_of(ATTENTION), f"one of {', '.join(ATTENTION)}"),
    _f("model.block_q", int, 128, "query tile of the blocked attention paths", _int(1),
       POSITIVE),
    _f("model.block_k", int, 128, "key tile of the blocked attention paths", _int(1), POSITIVE),
    _f("model.logn_length", int, None, "log-n attention scaling from this training length; "
       "None = off", _none_or(_int(2)), "None or an int >= 2 (the training length)"),
    _f("model.sop", bool, False, "ALBERT's sentence-order prediction task", _bool, TRUE_FALSE),
    _f("model.mlp", str, "dense", "'dense' (BERT) or 'glu' (GeGLU with activation 'gelu', "
       "SwiGLU with 'silu')", _one_of(MLP_KINDS),
       f"one of {', '.join(MLP_KINDS)} ('glu' with activation 'gelu' is GeGLU, 'silu' SwiGLU)"),
    _f("model.norm_bias", bool, True, "every LayerNorm has a bias (ModernBERT: none)", _bool,
       TRUE_FALSE),
    _f("model.attention_bias", bool, True, "query/key/value/output projections have biases",
       _bool, TRUE_FALSE),
    _f("model.mlp_bias", bool, True, "the MLP's projections have biases", _bool, TRUE_FALSE),
    _f("model.head_bias", bool, True, "the MLM head's transform has a bias", _bool, TRUE_FALSE),
    _f("model.head_activation", str, None, "the MLM head's activation; None = model.activation",
       _none_or(_one_of(ACTIVATIONS)),
       f"None (= model.activation) or one of {', '.join(ACTIVATIONS)}"),
    _f("model.first_attention_norm", bool, True,
       "False: layer 0 has no attention norm (ModernBERT, pre-LN only)", _bool, TRUE_FALSE),
    _f("model.local_window", int, None, "sliding window of the local layers in tokens; "
       "None = every layer global", _none_or(_int(1)),
       "None (all layers global) or an int >= 1 (tokens)"),
    _f("model.global_every", int, 1, "every k-th layer is global, the others local", _int(1),
       "an int >= 1"),
    _f("model.global_first", bool, True, "global layers are 0, k, 2k, ... (else k-1, 2k-1, ...)",
       _bool, TRUE_FALSE),
    _f("model.nope_every", int, None, "every m-th layer carries no positions (iRoPE); None = "
       "all do", _none_or(_int(1)), "None or an int >= 1"),
    _f("model.local_position", dict, {}, "position fields changed on local layers, e.g. "
       "{'base': 10000.0}; {} = the same scheme", _mapping,
       "a dict of position fields for the local layers (e.g. {'base': 10000.0}); {} = the "
       "global layers' scheme"),
    _f("model.attention_sinks", bool, False, "a learned sink logit per head in every softmax "
       "(gpt-oss)", _bool, TRUE_FALSE),
    # -- data ----------------------------------------------------------------------------------
    _f("data.corpus", str, "peoples_daily", "the training text (posjax.data.corpora)",
       _one_of(CORPORA), f"one of {', '.join(CORPORA)}"),
    _f("data.path", str, "", "the corpus file or directory; '' or None = the bundled copy",
       _none_or(_str), "a string path"),
    _f("data.tfds_name", str, "", "TFDS dataset name with data.corpus='tfds'", _none_or(_str),
       "a TFDS dataset name such as 'wikipedia/20230601.en'"),
    _f("data.tfds_split", str, "train", "TFDS split to read", _str, "a TFDS split name",
       in_defaults=False),
    _f("data.tfds_text_key", str, None, "TFDS text feature; None = the first known one",
       _none_or(_str), "None or a feature name", in_defaults=False),
    _f("data.seq_len", int, 128, "training row length in tokens", _int(3),
       "an int >= 3 ([CLS] x [SEP])"),
    _f("data.batch_size", int, 16, "rows per step, over all devices", _int(1), POSITIVE),
    _f("data.tokenizer", str, "chinese_chars", "tokenizer (posjax.data.tokenizers)",
       _one_of(TOKENIZERS), f"one of {', '.join(TOKENIZERS)}"),
    _f("data.vocab_size", int, 6000,
       "tokenizer size to build (the model's vocab_size is what it got)",
       _none_or(lambda v: is_int(v) and v > MIN_VOCAB),
       f"an int > {MIN_VOCAB} (the special tokens)"),
    _f("data.mask_rate", float, 0.15, "fraction of tokens masked for MLM",
       _real_in(0, 1, low_open=True, high_open=True), "a float in (0, 1)"),
    _f("data.whole_word", bool, False, "mask whole words (WordPiece continuations)", _bool,
       TRUE_FALSE),
    # 13% of People's Daily's articles (376 of them, ~228k characters): eval.py on a stock run
    # then scores ~34k masked tokens over hundreds of documents, enough for a +-0.5-point
    # interval; 2% gave 4.5k masked tokens from 53 articles.
    _f("data.heldout_fraction", float, 0.13, "fraction of documents held out for evaluation; "
       "None = 0",
       _none_or(_real_in(0, 1, low_open=False, high_open=True)), "a float in [0, 1)"),
    _f("data.max_documents", int, None, "use only the first N documents; None = all",
       _none_or(_int(1)), "None or a positive int"),
    _f("data.randomized_max_length", int, None, "randomized positions drawn below this "
       "length; None = off", _none_or(_int(1)), "None or an int >= data.seq_len"),
    _f("data.randomized_eval", bool, False, "evaluate with randomized positions too", _bool,
       TRUE_FALSE, in_defaults=False),
    _f("data.split_seed", int, 0, "seed of the held-out document split", is_int, "an int",
       in_defaults=False),
    _f("data.cache_dir", str, None, "where tokenized corpora are cached; None = the workdir",
       _none_or(_str), "None or a directory", in_defaults=False),
    _f("data.synthetic", dict, None, "generator settings of data.corpus='synthetic' "
       "(posjax.data.synthetic.DEFAULTS)", _mapping, "a dict of generator settings",
       in_defaults=False),
    _f("data.tasks", dict, None, "task rows mixed into training: {task: fraction} "
       "(posjax.data.tasks)", _mapping, "a dict {task name: fraction}", in_defaults=False),
    _f("data.task_digits", int, 5, "key / answer tokens of each task row",
       lambda v: is_int(v) and 1 <= v <= 64, "an int in [1, 64] (key / answer tokens)",
       in_defaults=False),
    _f("data.patches", dict, None, "image settings of data.corpus='patches' "
       "(posjax.data.patches.DEFAULTS)", _mapping, "a dict of image settings",
       in_defaults=False),
    # -- train ---------------------------------------------------------------------------------
    # 800 steps: long enough on a CPU for the held-out MLM accuracy to rise clearly above chance
    # (bench/README.md, training throughput); 300 steps stop much earlier on the curve.
    _f("train.steps", int, 800, "optimizer steps", _int(1), "an int >= 1"),
    _f("train.log_every", int, 25, "steps between console / TensorBoard lines", _int(1),
       "an int >= 1"),
    _f("train.eval_every", int, 200, "steps between held-out evaluations; 0 = none", _int(0),
       "an int >= 0 (0 = no evaluation)"),
    _f("train.eval_batches", int, 4, "held-out batches per evaluation", _int(1), "an int >= 1"),
    _f("train.checkpoint_every", int, 400, "steps between checkpoints", _int(1), "an int >= 1"),
    _f("train.keep_checkpoints", int, 2, "checkpoints kept", _int(1), "an int >= 1"),
    _f("train.warmup_steps", int, 50, "linear warm-up steps, < train.steps", _int(0),
       "an int >= 0"),
    # LAMB (posjax.training): 5e-3 learns clearly faster than 1e-3 at this CPU size.
    _f("train.learning_rate", float, 5e-3, "peak learning rate (LAMB)",
       lambda v: is_real(v) and v > 0, "a finite float > 0"),
    _f("train.weight_decay", float, 0.01, "decoupled weight decay (not on biases and norms)",
       lambda v: is_real(v) and v >= 0, "a finite float >= 0"),
    _f("train.clip_norm", float, 1.0, "global gradient-norm clip; None or 0 = none",
       _none_or(lambda v: is_real(v) and v >= 0),
       "None or 0 (no clipping), or a finite float > 0"),
    _f("train.b1", float, 0.9, "Adam beta1", _real_in(0, 1, low_open=False, high_open=True),
       "a float in [0, 1)"),
    _f("train.b2", float, 0.999, "Adam beta2", _real_in(0, 1, low_open=False, high_open=True),
       "a float in [0, 1)"),
    _f("train.eps", float, 1e-6, "Adam epsilon", lambda v: is_real(v) and v > 0,
       "a finite float > 0"),
    _f("train.nan_policy", str, "stop", "a non-finite step: 'stop' (exit 1) or 'skip' (count)",
       _one_of(NAN_POLICIES),
       "'stop' (default: exit 1 at the first non-finite step) or 'skip' (skip and count it)"),
    _f("train.schedule", str, "linear", "learning-rate schedule after warm-up",
       _one_of(SCHEDULES), f"one of {', '.join(SCHEDULES)}", in_defaults=False),
    _f("train.no_decay", tuple, None, "regexes of parameter paths without weight decay; "
       "None = biases, norms and sinks", _none_or(lambda v: isinstance(v, (list, tuple))),
       "None or a tuple of regexes", in_defaults=False),
    # -- mesh: sizes of the ('data', 'fsdp', 'tensor') mesh, -1 = the remaining devices --------
    _f("mesh.data", int, -1, "data-parallel axis size; -1 = the remaining devices",
       lambda v: is_int(v) and (v == -1 or v >= 1),
       "a positive int or -1 (= the remaining devices)"),
    _f("mesh.fsdp", int, 1, "parameter-sharding axis size; -1 = the remaining devices",
       lambda v: is_int(v) and (v == -1 or v >= 1),
       "a positive int or -1 (= the remaining devices)"),
    _f("mesh.tensor", int, 1, "tensor-parallel axis size; -1 = the remaining devices",
       lambda v: is_int(v) and (v == -1 or v >= 1),
       "a positive int or -1 (= the remaining devices)"),
    _f("mesh.dcn_data", int, 1, "part of mesh.data across slices (data-center network)",
       _int(1), "a positive int dividing mesh.data"),
    _f("mesh.dcn_fsdp", int, 1, "part of mesh.fsdp across slices", _int(1),
       "a positive int dividing mesh.fsdp"),
    _f("mesh.dcn_tensor", int, 1, "part of mesh.tensor across slices", _int(1),
       "a positive int dividing mesh.tensor"),
    _f("mesh.preset", str, "fsdp_tp", "sharding rules preset (posjax.mesh_rules); with fsdp = "
       "tensor = 1 it is data parallel", _none_or(_one_of(PRESETS)),
       f"one of {', '.join(repr(p) for p in PRESETS)}"),
    _f("mesh.rules", tuple, (), "(logical axis, mesh axes) pairs overriding the preset",
       _pairs, "(logical_name, mesh axes) pairs"),
)

BY_PATH: dict[str, Field] = {f.path: f for f in FIELDS}
KNOWN: dict[str, tuple] = {
    section: tuple(f.key for f in FIELDS if f.section == section)
    for section in SECTIONS if section != "position"
}


def nearest(path: str, candidates: Iterable[str], n: int = 3) -> list:
    """The closest valid keys to `path`: whole dotted paths first, then by last component."""
    candidates = list(candidates)
    close = difflib.get_close_matches(path, candidates, n=n, cutoff=0.6)
    if len(close) < n:
        last = path.rsplit(".", 1)[-1]
        tails = {c.rsplit(".", 1)[-1]: c for c in candidates}
        for tail in difflib.get_close_matches(last, list(tails), n=n, cutoff=0.7):
            if tails[tail] not in close:
                close.append(tails[tail])
    return close[:n]


def field(path: str) -> Field:
    return BY_PATH[path]


def kind(path: str) -> Optional[type]:
    """The type a `--config.<path>=v` override is parsed to (None: not a schema field)."""
    f = BY_PATH.get(path)
    return f.kind if f is not None else None


# ---------------------------------------------------------------------------------------------
# The default ConfigDict
# ---------------------------------------------------------------------------------------------
def _default_value(f: Field) -> Any:
    if f.default is None:
        return placeholder(f.kind)
    if f.kind is dict:
        return ml_collections.ConfigDict(dict(f.default))
    return f.default


def default_config() -> ml_collections.ConfigDict:
    """Every field with in_defaults, at its default; position = the learned table."""
    config = ml_collections.ConfigDict()
    for name in TOP_LEVEL:
        if name == "position":
            config.position = ml_collections.ConfigDict({"name": DEFAULT_POSITION})
        elif name in SECTIONS:
            config[name] = ml_collections.ConfigDict()
    for f in FIELDS:
        if not f.in_defaults:
            continue
        node = config[f.section] if f.section else config
        node[f.key] = _default_value(f)
    return config


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
def _lookup(config: Any, path: str) -> tuple[bool, Any]:
    node = config
    for part in path.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError, AttributeError, IndexError):
            return False, None
    return True, node


def value(config: Any, path: str) -> Any:
    """config's `path`, or the field's default where the config lacks it."""
    present, v = _lookup(config, path)
    return v if present else BY_PATH[path].default


def given(config: Any, path: str) -> Any:
    """What the config itself sets at `path`, None where it sets nothing: for fingerprints
    (cache keys) that must not change when a default is declared, never for behaviour."""
    return _lookup(config, path)[1]


def check_value(path: str, v: Any) -> Any:
    """`v` if the field's check accepts it; else ConfigError naming the field, v and what is
    allowed."""
    f = BY_PATH[path]
    if not f.ok(v):
        raise ConfigError(path, v, f.allowed)
    return v


def checked(config: Any, path: str) -> Any:
    """`value(config, path)`, checked (check_value)."""
    return check_value(path, value(config, path))


def check_all(config: Any, sections: tuple = TOP_LEVEL) -> None:
    """Every declared field of `sections`, in the table's order."""
    for f in FIELDS:
        if (f.section or f.path) in sections:
            checked(config, f.path)


# ---------------------------------------------------------------------------------------------
# The read-only view
# ---------------------------------------------------------------------------------------------
def _plain(node: Any) -> Any:
    if hasattr(node, "to_dict"):
        return node.to_dict()
    if hasattr(node, "items"):
        return {k: _plain(v) for k, v in node.items()}
    return node


def completed(config: Any) -> dict:
    """A plain dict of `config` with every schema field present: the defaults of the fields
    it lacks (an older saved config, a config file that leaves an optional field out). The one
    place that fills them."""
    out = dict(_plain(config)) if config is not None else {}
    for f in FIELDS:
        if f.section:
            section = out.get(f.section)
            if section is None:
                section = out[f.section] = {}
            elif not isinstance(section, dict):
                continue
        else:
            section = out
        if f.key not in section:
            section[f.key] = dict(f.default) if isinstance(f.default, dict) else f.default
    out.setdefault("position", {"name": DEFAULT_POSITION})
    return out


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return View(value)
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


class View(Mapping):
    """A read-only config: fields by attribute (`v.train.steps`) or key, sections are Views,
    lists are tuples. Made by `view`; setting anything raises."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict):
        object.__setattr__(self, "_fields", {k: _frozen(v) for k, v in fields.items()})

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(f"config has no field {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the config view is read-only (setting {name!r})")

    def __getitem__(self, name: str) -> Any:
        return self._fields[name]

    def __iter__(self):
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"View({self.to_dict()!r})"

    def to_dict(self) -> dict:
        return {k: v.to_dict() if isinstance(v, View) else v for k, v in self._fields.items()}


def section_view(node: Any, section: str) -> View:
    """The view of one section (`config.train`, `config.mesh`; None = all defaults), for code
    handed a section rather than the whole config."""
    if isinstance(node, View) and all(k in node for k in KNOWN[section]):
        return node
    return view({section: node if node is not None else {}})[section]


def view(config: Any) -> View:
    """The read-only view of `config` that code reads by attribute (`v.train.eval_every`):
    every schema field present (defaults filled by `completed`), nothing settable. A view
    passes through unchanged. Code takes it where it reads, since the entry points still fill
    fields after validation (model.vocab_size from the tokenizer)."""
    if isinstance(config, View):
        return config
    return View(completed(config))
