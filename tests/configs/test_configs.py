"""Every config file loads for every variant and passes validate_model_config; unknown
variants raise ConfigError naming the allowed ones."""

from __future__ import annotations

import importlib
import pathlib

import pytest

from posjax import models, positions
from posjax.errors import ConfigError

ROOT = pathlib.Path(__file__).resolve().parents[2]
# configs/workdir.py takes a workdir path, not a variant (tests/convert/test_train_resume.py)
FILES = sorted(p.stem for p in (ROOT / "configs").glob("*.py")
               if p.stem not in ("__init__", "workdir"))
# Configs whose argument is not a size variant: tiny takes a scheme name, algorithmic
# 'task[,scheme][,randomized][,tiny]' (tests/training/test_algorithmic_train.py)
OWN_ARGUMENT = {"tiny": "learned", "algorithmic": "reverse_string"}
VARIANTS = (None, "tiny", "base")
# ':base' of configs that reproduce a published model other than BERT-base:
# (hidden, layers, heads, mlp_dim, seq_len, max_length)
PUBLISHED_BASE = {"modernbert": (768, 22, 12, 1152, 1024, 8192)}


def _load(stem):
    return importlib.import_module(f"configs.{stem}")


def _cases():
    for stem in FILES:
        if stem == "tiny":  # its argument is a scheme name
            yield from ((stem, name) for name in positions.names())
            yield stem, None
        elif stem == "algorithmic":
            yield from ((stem, a) for a in ("reverse_string", "parity_check,xl,randomized",
                                            "bucket_sort,learned,tiny"))
        else:
            yield from ((stem, v) for v in VARIANTS)


@pytest.mark.parametrize("stem,variant", list(_cases()))
def test_config_validates(stem, variant):
    config = _load(stem).get_config(variant)
    spec = models.validate_model_config(config)  # vocab_size not filled yet: allowed
    assert config.model.vocab_size is None
    config.model.vocab_size = 1000
    spec = models.validate_model_config(config, require_vocab=True)
    assert config.data.seq_len <= spec.max_length
    assert config.train.steps > 0  # every run ends by itself
    if variant == "base" and stem in PUBLISHED_BASE:
        assert (spec.hidden, spec.num_layers, spec.num_heads, spec.mlp_dim, config.data.seq_len,
                spec.max_length) == PUBLISHED_BASE[stem]
        assert spec.dtype == "bfloat16"
    elif variant == "base":
        assert (spec.hidden, spec.num_layers, spec.num_heads, spec.mlp_dim) == (768, 12, 12, 3072)
        # image configs (data.corpus='patches') read 16 x 16 patches, text 512 tokens
        images = config.data.corpus == "patches"
        assert config.data.seq_len == (256 if images else 512) and spec.dtype == "bfloat16"
    if variant == "tiny":  # image configs: a 4 x 4 grid of patches
        length = 16 if config.data.corpus == "patches" else 32
        assert spec.hidden == 32 and config.data.seq_len == length and config.data.batch_size == 4


def test_cpu_defaults_are_cpu_sized():
    for stem in FILES:
        config = _load(stem).get_config(OWN_ARGUMENT.get(stem))
        assert config.model.hidden <= 128 and config.data.seq_len <= 128
        # a reproduction keeps its reference's step count (experiments/example.py: 10,000)
        steps = 10_000 if stem == "algorithmic" else 1000
        assert config.model.dtype == "float32" and config.train.steps <= steps


@pytest.mark.parametrize("stem", [s for s in FILES if s not in OWN_ARGUMENT])
def test_unknown_variant_names_the_allowed_ones(stem):
    with pytest.raises(ConfigError, match="'tiny'.*'base'"):
        _load(stem).get_config("huge")


def test_tiny_takes_a_scheme_name():
    assert _load("tiny").get_config("rope").position.name == "rope"
    with pytest.raises(ConfigError, match="scheme name"):
        _load("tiny").get_config("no_such_scheme")


def test_modernbert_is_modernbert():
    """Pre-LN without biases, GeGLU, half-split RoPE theta 160k, layer 0 without attn_norm."""
    spec = models.validate_model_config(_load("modernbert").get_config("base"))
    assert (spec.post_ln, spec.mlp, spec.activation, spec.first_attention_norm) == (
        False, "glu", "gelu", False)
    assert not (spec.norm_bias or spec.attention_bias or spec.mlp_bias or spec.head_bias)
    assert spec.type_vocab_size == 0 and spec.dropout == 0.0
    position = _load("modernbert").get_config("base").position.to_dict()
    assert position == {"name": "rope", "interleaved": False, "base": 160000.0}
