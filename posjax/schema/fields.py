"""The declarations: every field of a training config with its type, default, doc and check.

One `Field(path, kind, default, doc, ok, allowed)` a field, in FIELDS; posjax.schema builds
everything else (the default ConfigDict, the known keys, override types, checks, the view) from
this table. A new field is one line here.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable

SECTIONS = ("model", "position", "data", "train", "mesh")
TOP_LEVEL = ("seed",) + SECTIONS

# Names whose implementations live higher up (attention, models, data); those modules use these
# tuples, and tests/schema/test_schema.py checks that each implementation table has exactly them.
ATTENTION = ("reference", "lean", "chunked", "rows", "kernel", "auto")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")
DTYPES = ("float32", "bfloat16")
MLP_KINDS = ("dense", "glu")
REMAT = ("layer", "full")  # posjax/models/remat.py; None: no remat
CORPORA = ("peoples_daily", "kjv", "text_dir", "tfds", "synthetic", "patches", "algorithmic")
TOKENIZERS = ("chinese_chars", "wordpiece", "patch_codes", "task_symbols")
EMBEDDING_STYLES = ("bert", "scaled")  # posjax/models/encoder.py Embeddings
TASK_LOSSES = ("outputs", "mask")  # posjax/data/tape.py
KERNEL_INITS = ("normal", "fan_in")  # posjax/models/partitioning.py kernel_initializer
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


POSITIVE = "a positive int"
TRUE_FALSE = "True or False"

FIELDS: tuple[Field, ...] = (
    Field("seed", int, 0, "the seed of parameters, dropout and data order", is_int, "an int"),
    # -- model ---------------------------------------------------------------------------------
    Field("model.vocab_size", int, None, "vocabulary size; None = filled from the tokenizer",
       _none_or(_int(MIN_VOCAB)),
       f"an int >= {MIN_VOCAB} (filled from the tokenizer before building the model)"),
    Field("model.hidden", int, 128, "model width", _int(1), POSITIVE),
    Field("model.num_layers", int, 2, "number of Transformer layers", _int(1), POSITIVE),
    Field("model.num_heads", int, 4, "attention heads per layer", _int(1), POSITIVE),
    Field("model.head_dim", int, None, "width of one head; None = hidden / num_heads",
       _none_or(_int(1)), POSITIVE),
    Field("model.mlp_dim", int, 512, "inner width of the MLP", _int(1), POSITIVE),
    Field("model.embedding_dim", int, None,
       "token embedding width; None = hidden, < hidden: ALBERT factorization",
       _none_or(_int(1)), "None or a positive int <= model.hidden"),
    Field("model.share_layers", bool, False, "one parameter set for every layer (ALBERT)",
       _bool, TRUE_FALSE),
    Field("model.post_ln", bool, True, "LayerNorm after each residual (BERT); False = pre-LN "
       "with a final LayerNorm", _bool, TRUE_FALSE),
    Field("model.causal", bool, False, "the causal-LM variant of the same stack", _bool, TRUE_FALSE),
    Field("model.type_vocab_size", int, 2, "token type embeddings; 0 = none", _int(0),
       "an int >= 0 (0 = no token type embeddings)"),
    Field("model.dropout", float, 0.1, "dropout on embeddings, attention output and MLP",
       lambda v: isinstance(v, (int, float)) and 0.0 <= v < 1.0, "a float in [0, 1)"),
    Field("model.activation", str, "gelu", "MLP activation; 'gelu' is BERT's exact erf GELU",
       _one_of(ACTIVATIONS), f"one of {', '.join(ACTIVATIONS)}"),
    Field("model.kernel_init", str, "normal", "init of every dense kernel: 'normal' (truncated "
       "normal, stddev 0.02: BERT) or 'fan_in' (truncated normal, stddev 1/sqrt(fan_in): "
       "haiku's Linear, the algorithmic benchmark's reference); embedding tables stay 'normal'",
       _one_of(KERNEL_INITS), f"one of {', '.join(KERNEL_INITS)}"),
    Field("model.dtype", str, "float32", "compute dtype; parameters are always float32",
       _one_of(DTYPES), f"one of {', '.join(DTYPES)}"),
    Field("model.layer_norm_eps", float, 1e-12, "LayerNorm epsilon",
       lambda v: isinstance(v, float) and v > 0, "a float > 0"),
    Field("model.max_length", int, 512,
       "largest position + 1 the model supports (learned table rows)", _int(1), POSITIVE),
    Field("model.attention", str, "auto", "attention implementation (posjax.attention)",
       _one_of(ATTENTION), f"one of {', '.join(ATTENTION)}"),
    Field("model.block_q", int, 128, "query tile of the blocked attention paths", _int(1),
       POSITIVE),
    Field("model.block_k", int, 128, "key tile of the blocked attention paths", _int(1), POSITIVE),
    Field("model.logn_length", int, None, "log-n attention scaling from this training length; "
       "None = off", _none_or(_int(2)), "None or an int >= 2 (the training length)"),
    Field("model.sop", bool, False, "ALBERT's sentence-order prediction task", _bool, TRUE_FALSE),
    Field("model.mlp", str, "dense", "'dense' (BERT) or 'glu' (GeGLU with activation 'gelu', "
       "SwiGLU with 'silu')", _one_of(MLP_KINDS),
       f"one of {', '.join(MLP_KINDS)} ('glu' with activation 'gelu' is GeGLU, 'silu' SwiGLU)"),
    Field("model.norm_bias", bool, True, "every LayerNorm has a bias (ModernBERT: none)", _bool,
       TRUE_FALSE),
    Field("model.attention_bias", bool, True, "query/key/value/output projections have biases",
       _bool, TRUE_FALSE),
    Field("model.mlp_bias", bool, True, "the MLP's projections have biases", _bool, TRUE_FALSE),
    Field("model.head_bias", bool, True, "the MLM head's transform has a bias", _bool, TRUE_FALSE),
    Field("model.head_activation", str, None, "the MLM head's activation; None = model.activation",
       _none_or(_one_of(ACTIVATIONS)),
       f"None (= model.activation) or one of {', '.join(ACTIVATIONS)}"),
    Field("model.first_attention_norm", bool, True,
       "False: layer 0 has no attention norm (ModernBERT, pre-LN only)", _bool, TRUE_FALSE),
    Field("model.local_window", int, None, "sliding window of the local layers in tokens; "
       "None = every layer global", _none_or(_int(1)),
       "None (all layers global) or an int >= 1 (tokens)"),
    Field("model.global_every", int, 1, "every k-th layer is global, the others local", _int(1),
       "an int >= 1"),
    Field("model.global_first", bool, True, "global layers are 0, k, 2k, ... (else k-1, 2k-1, ...)",
       _bool, TRUE_FALSE),
    Field("model.nope_every", int, None, "every m-th layer carries no positions (iRoPE); None = "
       "all do", _none_or(_int(1)), "None or an int >= 1"),
    Field("model.local_position", dict, {}, "position fields changed on local layers, e.g. "
       "{'base': 10000.0}; {} = the same scheme", _mapping,
       "a dict of position fields for the local layers (e.g. {'base': 10000.0}); {} = the "
       "global layers' scheme"),
    Field("model.attention_sinks", bool, False, "a learned sink logit per head in every softmax "
       "(gpt-oss)", _bool, TRUE_FALSE),
    Field("model.embedding_style", str, "bert", "'bert': word (+ embed hook + token type) -> "
       "LayerNorm -> dropout; 'scaled': sqrt(embedding_dim) * word (+ embed hook), no LayerNorm, "
       "dropout only where the scheme adds a position vector (Vaswani; Ruoss et al.'s encoder)",
       _one_of(EMBEDDING_STYLES), f"one of {', '.join(EMBEDDING_STYLES)}", in_defaults=False),
    Field("model.output_classes", int, None, "a plain linear head to this many classes at every "
       "place instead of the MLM / LM head (data.corpus='algorithmic': the task's output size); "
       "None = the MLM / LM head", _none_or(_int(2)), "None or an int >= 2",
       in_defaults=False),
    Field("model.remat", str, None, "per-layer rematerialization in training: keep less, "
       "recompute in the backward (posjax/models/remat.py; None: keep everything)",
       _none_or(_one_of(REMAT)), f"None or one of {', '.join(REMAT)} (per-layer "
       "rematerialization)", in_defaults=False),
    # -- data ----------------------------------------------------------------------------------
    Field("data.corpus", str, "peoples_daily", "the training text (posjax.data.corpora)",
       _one_of(CORPORA), f"one of {', '.join(CORPORA)}"),
    Field("data.path", str, "", "the corpus file or directory; '' or None = the bundled copy",
       _none_or(_str), "a string path"),
    Field("data.tfds_name", str, "", "TFDS dataset name with data.corpus='tfds'", _none_or(_str),
       "a TFDS dataset name such as 'wikipedia/20230601.en'"),
    Field("data.tfds_split", str, "train", "TFDS split to read", _str, "a TFDS split name",
       in_defaults=False),
    Field("data.tfds_text_key", str, None, "TFDS text feature; None = the first known one",
       _none_or(_str), "None or a feature name", in_defaults=False),
    Field("data.seq_len", int, 128, "training row length in tokens", _int(3),
       "an int >= 3 ([CLS] x [SEP])"),
    Field("data.batch_size", int, 16, "rows per step, over all devices", _int(1), POSITIVE),
    Field("data.tokenizer", str, "chinese_chars", "tokenizer (posjax.data.tokenizers)",
       _one_of(TOKENIZERS), f"one of {', '.join(TOKENIZERS)}"),
    Field("data.vocab_size", int, 6000,
       "tokenizer size to build (the model's vocab_size is what it got)",
       _none_or(lambda v: is_int(v) and v > MIN_VOCAB),
       f"an int > {MIN_VOCAB} (the special tokens)"),
    Field("data.mask_rate", float, 0.15, "fraction of tokens masked for MLM",
       _real_in(0, 1, low_open=True, high_open=True), "a float in (0, 1)"),
    Field("data.whole_word", bool, False, "mask whole words (WordPiece continuations)", _bool,
       TRUE_FALSE),
    # 13% of People's Daily's articles (376 of them, ~228k characters): eval.py on a stock run
    # then scores ~34k masked tokens over hundreds of documents, enough for a +-0.5-point
    # interval; 2% gave 4.5k masked tokens from 53 articles.
    Field("data.heldout_fraction", float, 0.13, "fraction of documents held out for evaluation; "
       "None = 0",
       _none_or(_real_in(0, 1, low_open=False, high_open=True)), "a float in [0, 1)"),
    Field("data.max_documents", int, None, "use only the first N documents; None = all",
       _none_or(_int(1)), "None or a positive int"),
    Field("data.randomized_max_length", int, None, "randomized positions drawn below this "
       "length; None = off", _none_or(_int(1)), "None or an int >= data.seq_len"),
    Field("data.randomized_eval", bool, False, "evaluate with randomized positions too", _bool,
       TRUE_FALSE, in_defaults=False),
    Field("data.randomized_layers", bool, False, "with data.randomized_max_length (algorithmic "
       "tapes): every attention layer draws its own ordered subset, as Ruoss et al.'s code "
       "randomizes RoPE and relative encodings per layer; the embeddings keep the batch's",
       _bool, TRUE_FALSE, in_defaults=False),
    Field("data.pose_target_length", int, 0, "PoSE (Zhu et al. 2024, posjax.data.pose): "
       "training positions skip through a window of this length in chunks; 0 = off",
       _int(0), "0 (off) or an int > data.seq_len", in_defaults=False),
    Field("data.pose_chunks", int, 2, "PoSE: chunks per training example, each shifted by "
       "its own skip", _int(1), "an int in [1, data.seq_len]", in_defaults=False),
    Field("data.split_seed", int, 0, "seed of the held-out document split", is_int, "an int",
       in_defaults=False),
    Field("data.cache_dir", str, None, "where tokenized corpora are cached; None = the workdir",
       _none_or(_str), "None or a directory", in_defaults=False),
    Field("data.synthetic", dict, None, "generator settings of data.corpus='synthetic' "
       "(posjax.data.synthetic.DEFAULTS)", _mapping, "a dict of generator settings",
       in_defaults=False),
    Field("data.tasks", dict, None, "task rows mixed into training: {task: fraction} "
       "(posjax.data.tasks)", _mapping, "a dict {task name: fraction}", in_defaults=False),
    Field("data.task_digits", int, 5, "key / answer tokens of each task row",
       lambda v: is_int(v) and 1 <= v <= 64, "an int in [1, 64] (key / answer tokens)",
       in_defaults=False),
    Field("data.patches", dict, None, "image settings of data.corpus='patches' "
       "(posjax.data.patches.DEFAULTS)", _mapping, "a dict of image settings",
       in_defaults=False),
    Field("data.task", str, None, "the algorithmic task of data.corpus='algorithmic' "
       "(posjax.data.algorithmic)", _none_or(_str), "an algorithmic task name",
       in_defaults=False),
    Field("data.max_input_length", int, 40, "algorithmic curriculum: each batch's input length "
       "is uniform in 1..N", _int(1), POSITIVE, in_defaults=False),
    Field("data.bucket_multiple", int, 16, "algorithmic tapes (inputs + one empty token per "
       "output) are padded to a multiple of this, at most data.seq_len: one compile per bucket",
       _int(1), POSITIVE, in_defaults=False),
    Field("data.task_loss", str, "outputs", "algorithmic loss places: 'outputs' (every output "
       "place, as the reference trains; accuracy over the task's mask) or 'mask' (only the "
       "task's masked places)", _one_of(TASK_LOSSES), f"one of {', '.join(TASK_LOSSES)}",
       in_defaults=False),
    # -- train ---------------------------------------------------------------------------------
    # 800 steps: long enough on a CPU for the held-out MLM accuracy to rise clearly above chance
    # (bench/README.md, training throughput); 300 steps stop much earlier on the curve.
    Field("train.steps", int, 800, "optimizer steps", _int(1), "an int >= 1"),
    Field("train.log_every", int, 25, "steps between console / TensorBoard lines", _int(1),
       "an int >= 1"),
    Field("train.eval_every", int, 200, "steps between held-out evaluations; 0 = none", _int(0),
       "an int >= 0 (0 = no evaluation)"),
    Field("train.eval_batches", int, 4, "held-out batches per evaluation", _int(1), "an int >= 1"),
    Field("train.checkpoint_every", int, 400, "steps between checkpoints", _int(1), "an int >= 1"),
    Field("train.keep_checkpoints", int, 2, "checkpoints kept", _int(1), "an int >= 1"),
    Field("train.warmup_steps", int, 50, "linear warm-up steps, < train.steps", _int(0),
       "an int >= 0"),
    # LAMB (posjax.training): 5e-3 learns clearly faster than 1e-3 at this CPU size.
    Field("train.learning_rate", float, 5e-3, "peak learning rate (LAMB)",
       lambda v: is_real(v) and v > 0, "a finite float > 0"),
    Field("train.weight_decay", float, 0.01, "decoupled weight decay (not on biases and norms)",
       lambda v: is_real(v) and v >= 0, "a finite float >= 0"),
    Field("train.clip_norm", float, 1.0, "global gradient-norm clip; None or 0 = none",
       _none_or(lambda v: is_real(v) and v >= 0),
       "None or 0 (no clipping), or a finite float > 0"),
    Field("train.b1", float, 0.9, "Adam beta1", _real_in(0, 1, low_open=False, high_open=True),
       "a float in [0, 1)"),
    Field("train.b2", float, 0.999, "Adam beta2", _real_in(0, 1, low_open=False, high_open=True),
       "a float in [0, 1)"),
    Field("train.eps", float, 1e-6, "Adam epsilon", lambda v: is_real(v) and v > 0,
       "a finite float > 0"),
    Field("train.nan_policy", str, "stop", "a non-finite step: 'stop' (exit 1) or 'skip' (count)",
       _one_of(NAN_POLICIES),
       "'stop' (default: exit 1 at the first non-finite step) or 'skip' (skip and count it)"),
    Field("train.schedule", str, "linear", "learning-rate schedule after warm-up",
       _one_of(SCHEDULES), f"one of {', '.join(SCHEDULES)}", in_defaults=False),
    Field("train.no_decay", tuple, None, "regexes of parameter paths without weight decay; "
       "None = biases, norms and sinks", _none_or(lambda v: isinstance(v, (list, tuple))),
       "None or a tuple of regexes", in_defaults=False),
    # -- mesh: sizes of the ('data', 'fsdp', 'tensor') mesh, -1 = the remaining devices --------
    Field("mesh.data", int, -1, "data-parallel axis size; -1 = the remaining devices",
       lambda v: is_int(v) and (v == -1 or v >= 1),
       "a positive int or -1 (= the remaining devices)"),
    Field("mesh.fsdp", int, 1, "parameter-sharding axis size; -1 = the remaining devices",
       lambda v: is_int(v) and (v == -1 or v >= 1),
       "a positive int or -1 (= the remaining devices)"),
    Field("mesh.tensor", int, 1, "tensor-parallel axis size; -1 = the remaining devices",
       lambda v: is_int(v) and (v == -1 or v >= 1),
       "a positive int or -1 (= the remaining devices)"),
    Field("mesh.dcn_data", int, 1, "part of mesh.data across slices (data-center network)",
       _int(1), "a positive int dividing mesh.data"),
    Field("mesh.dcn_fsdp", int, 1, "part of mesh.fsdp across slices", _int(1),
       "a positive int dividing mesh.fsdp"),
    Field("mesh.dcn_tensor", int, 1, "part of mesh.tensor across slices", _int(1),
       "a positive int dividing mesh.tensor"),
    Field("mesh.preset", str, "fsdp_tp", "sharding rules preset (posjax.mesh_rules); with fsdp = "
       "tensor = 1 it is data parallel", _none_or(_one_of(PRESETS)),
       f"one of {', '.join(repr(p) for p in PRESETS)}"),
    Field("mesh.rules", tuple, (), "(logical axis, mesh axes) pairs overriding the preset",
       _pairs, "(logical_name, mesh axes) pairs"),
)
