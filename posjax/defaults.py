"""Every config default in one place; the config files change only what makes them what they are.

The user-facing config files (configs/*.py in the repository, `--config=configs/nezha.py`) start
from `get_config(variant)` here, and so do the Hugging Face converter and library users of an
installed posjax (`from posjax import defaults; config = defaults.get_config("tiny")`): the
defaults ship inside the package, so a plain `pip install .` has them.

Variants (`get_config(arg)`):
  ''/None  CPU default: hidden 128, 2 layers, 4 heads, seq_len 128, batch 16, 800 steps on the
           People's Daily corpus (minutes on a laptop CPU).
  'tiny'   tests: 2 layers, hidden 32, seq_len 32, batch 4, a handful of steps.
  'base'   BERT-base: 12 layers, 768 hidden, 12 heads, 3072 mlp, 512 tokens, bf16 compute.
"""

from __future__ import annotations

from typing import Optional, Sequence

import ml_collections
from ml_collections.config_dict import placeholder

from posjax.errors import ConfigError

VARIANTS = ("", "tiny", "base")

def parse_variant(arg: Optional[str], allowed: Sequence[str] = VARIANTS) -> str:
    """'' for None; ConfigError naming the allowed variants otherwise."""
    variant = (arg or "").strip()
    if variant not in allowed:
        raise ConfigError(
            "config variant", arg, f"one of {', '.join(repr(a) for a in allowed)} ('' = CPU default)"
        )
    return variant


def get_config(arg: Optional[str] = None) -> ml_collections.ConfigDict:
    variant = parse_variant(arg)
    config = ml_collections.ConfigDict()
    config.seed = 0

    m = config.model = ml_collections.ConfigDict()
    m.vocab_size = placeholder(int)  # set from the tokenizer
    m.hidden = 128
    m.num_layers = 2
    m.num_heads = 4
    m.head_dim = placeholder(int)  # None = hidden/num_heads
    m.mlp_dim = 512
    m.embedding_dim = placeholder(int)  # < hidden: ALBERT
    m.share_layers = False
    m.post_ln = True  # BERT; False = pre-LN with a final LayerNorm
    m.causal = False  # True: the causal-LM variant of the same stack
    m.type_vocab_size = 2
    m.dropout = 0.1
    m.activation = "gelu"  # exact erf GELU, as BERT
    m.dtype = "float32"  # compute dtype; parameters are always float32
    m.layer_norm_eps = 1e-12
    m.max_length = 512  # largest position + 1 the model supports (learned table rows)
    m.attention = "auto"  # reference | chunked | kernel | auto
    m.block_q = 128
    m.block_k = 128
    m.logn_length = placeholder(int)
    m.sop = False
    # Modern encoders (configs/modernbert.py): the gated MLP, bias-free projections and norms,
    # the MLM head's own activation, and ModernBERT's layer 0 without an attention norm.
    m.mlp = "dense"  # dense | glu (GeGLU with activation 'gelu', SwiGLU with 'silu')
    m.norm_bias = True
    m.attention_bias = True
    m.mlp_bias = True
    m.head_bias = True
    m.head_activation = placeholder(str)  # None = model.activation
    m.first_attention_norm = True
    # Layer layout (posjax/models/layout.py): sliding-window local layers, global every k-th
    # layer (from layer 0 with global_first), NoPE every m-th layer; local_position: position
    # fields changed on local layers (e.g. {'base': 10000.0}); {} = the same scheme.
    m.local_window = placeholder(int)  # None = every layer global
    m.global_every = 1
    m.global_first = True
    m.nope_every = placeholder(int)
    m.local_position = ml_collections.ConfigDict()
    m.attention_sinks = False  # a learned sink logit per head in every softmax (gpt-oss)

    config.position = ml_collections.ConfigDict({"name": "learned"})

    d = config.data = ml_collections.ConfigDict()
    d.corpus = "peoples_daily"  # peoples_daily | kjv | text_dir | tfds
    d.path = ""
    d.tfds_name = ""
    d.seq_len = 128
    d.batch_size = 16
    d.tokenizer = "chinese_chars"  # chinese_chars | wordpiece
    d.vocab_size = 6000  # tokenizer size to build (the model's vocab_size is what it got)
    d.mask_rate = 0.15
    d.whole_word = False
    # 13% of People's Daily's articles (376 of them, ~228k characters): eval.py on a stock run
    # then scores ~34k masked tokens over hundreds of documents, enough for a +-0.5-point
    # interval; 2% gave 4.5k masked tokens from 53 articles.
    d.heldout_fraction = 0.13
    d.max_documents = placeholder(int)
    d.randomized_max_length = placeholder(int)

    t = config.train = ml_collections.ConfigDict()
    # 800 steps: long enough on a CPU for the held-out MLM accuracy to rise clearly above chance
    # (bench/README.md, training throughput); 300 steps stop much earlier on the curve.
    t.steps = 800
    # LAMB (posjax.training): 5e-3 learns clearly faster than 1e-3 at this CPU size.
    t.learning_rate = 5e-3
    t.warmup_steps = 50
    t.weight_decay = 0.01
    t.clip_norm = 1.0
    t.b1 = 0.9
    t.b2 = 0.999
    t.eps = 1e-6
    t.log_every = 25
    t.eval_every = 200
    t.eval_batches = 4
    t.checkpoint_every = 400
    t.keep_checkpoints = 2
    t.nan_policy = "stop"  # stop | skip

    # Sizes of the ('data', 'fsdp', 'tensor') mesh, -1 = the remaining devices. dcn_<axis>: the
    # part of that axis that spans TPU slices / hosts over the data-center network (multi-slice;
    # 1 = all inside one slice). preset: 'data' | 'fsdp' | 'fsdp_tp' (posjax.mesh_rules);
    # rules: (logical axis, mesh axes) pairs that override single entries of the preset.
    mesh = config.mesh = ml_collections.ConfigDict()
    mesh.data = -1
    mesh.fsdp = 1
    mesh.tensor = 1
    mesh.dcn_data = 1
    mesh.dcn_fsdp = 1
    mesh.dcn_tensor = 1
    mesh.preset = "fsdp_tp"  # posjax/mesh_rules.py; with fsdp = tensor = 1 it is data parallel
    mesh.rules = ()

    if variant == "tiny":
        tiny(config)
    elif variant == "base":
        paper_size(config)
    return config


def tiny(config: ml_collections.ConfigDict) -> None:
    """Test size: compiles and runs a few steps in seconds."""
    m, d, t = config.model, config.data, config.train
    m.hidden, m.num_layers, m.num_heads, m.mlp_dim = 32, 2, 4, 64
    m.max_length = 64
    d.seq_len, d.batch_size = 32, 4
    d.vocab_size = 1000
    d.max_documents = 200
    t.steps, t.warmup_steps = 4, 1
    t.log_every, t.eval_every, t.eval_batches, t.checkpoint_every = 2, 4, 1, 4


def paper_size(config: ml_collections.ConfigDict) -> None:
    """BERT-base for an accelerator: 12 x 768, 12 heads, 3072 mlp, 512 tokens, bf16."""
    m, d, t = config.model, config.data, config.train
    m.hidden, m.num_layers, m.num_heads, m.mlp_dim = 768, 12, 12, 3072
    m.max_length = 512
    m.dtype = "bfloat16"
    d.seq_len, d.batch_size = 512, 256
    d.vocab_size = 21128  # bert-base-chinese's vocabulary size
    t.steps, t.warmup_steps = 1_000_000, 10_000
    t.learning_rate = 5e-4  # LAMB at batch 256 (You et al.: ~8.8e-4 at 1k, sqrt scaling)
    t.log_every, t.eval_every, t.eval_batches = 100, 5_000, 20
    t.checkpoint_every, t.keep_checkpoints = 10_000, 3


def position(name: str, **fields) -> ml_collections.ConfigDict:
    """config.position: the scheme name plus the fields of its dataclass."""
    return ml_collections.ConfigDict({"name": name, **fields})


def english(config: ml_collections.ConfigDict, variant: str) -> None:
    """Switch the data to the King James Bible with a WordPiece vocabulary."""
    config.data.corpus = "kjv"
    config.data.tokenizer = "wordpiece"
    config.data.vocab_size = {"": 8000, "tiny": 1000, "base": 30522}[variant]
