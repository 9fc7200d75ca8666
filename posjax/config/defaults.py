"""The default config and its sizes; the config files change only what makes them what they are.

The user-facing config files (configs/*.py in the repository, `--config=configs/nezha.py`) start
from `get_config(variant)` here, and so do the Hugging Face converter and library users of an
installed posjax (`from posjax.config import defaults; config = defaults.get_config("tiny")`): the
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

from posjax import schema
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
    """The schema's defaults (posjax.schema, where every field is declared), at `arg`'s size."""
    variant = parse_variant(arg)
    config = schema.default_config()
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
