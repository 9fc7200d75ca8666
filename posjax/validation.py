"""validate(config): every config check in one call, before anything touches disk or compiles.

The checks themselves live next to the code that relies on them (models.validate_model_config
for config.model + config.position, the data pipeline's checks, mesh_rules.mesh_shape and
logical_rules for config.mesh); this module adds what no package owned (config.train ranges,
the data fields read only later, unknown keys) and calls all of them in a fixed order, so a
wrong config fails in about a second with one ConfigError naming the field, the value and what
is allowed. train.py calls it first and prints that as one line with exit code 2.

Unknown keys are errors: a typo in a config file (`t.checkpoint_evry = 10`) would otherwise be
ignored silently. Command-line overrides are checked earlier, by posjax.overrides.
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Any, Optional

from posjax import mesh_rules
from posjax.errors import ConfigError, check

SECTIONS = ("model", "position", "data", "train", "mesh")
TOP_LEVEL = ("seed",) + SECTIONS

# Every field a posjax package reads from each section (configs/base.py sets most of them; the
# rest are optional and read with a default). tests/reliability/test_validation.py checks
# that every config file in configs/ passes, so a new field must be added here.
KNOWN = {
    "model": ("vocab_size", "hidden", "num_layers", "num_heads", "head_dim", "mlp_dim",
              "embedding_dim", "share_layers", "post_ln", "causal", "type_vocab_size", "dropout",
              "activation", "dtype", "layer_norm_eps", "max_length",
              "attention", "block_q", "block_k", "logn_length", "sop",
              # modern encoders (ModernBERT, NomicBERT): posjax/models/spec.py
              "mlp", "norm_bias", "attention_bias", "mlp_bias", "head_bias", "head_activation",
              "first_attention_norm",
              # layer layout and attention sinks: posjax/models/layout.py
              "local_window", "global_every", "global_first", "nope_every", "local_position",
              "attention_sinks",
              # per-layer rematerialization: posjax/models/remat.py
              "remat"),
    "data": ("corpus", "path", "tfds_name", "tfds_split", "tfds_text_key", "seq_len",
             "batch_size", "tokenizer", "vocab_size", "mask_rate", "whole_word",
             "heldout_fraction", "max_documents", "randomized_max_length", "randomized_eval",
             "split_seed", "cache_dir", "synthetic", "tasks", "task_digits", "patches"),
    "train": ("steps", "learning_rate", "warmup_steps", "weight_decay", "clip_norm", "b1", "b2",
              "eps", "no_decay", "log_every", "eval_every", "eval_batches", "checkpoint_every",
              "keep_checkpoints", "nan_policy", "schedule"),
    "mesh": ("data", "fsdp", "tensor", "rules", "preset", "dcn_data", "dcn_fsdp", "dcn_tensor"),
}

NAN_POLICIES = ("stop", "skip", "raise")  # 'raise' = 'stop' (configs/base.py used it first)


def _keys(section: Any) -> list:
    try:
        return list(section.keys())
    except AttributeError:
        return []


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(float(x))


def check_keys(config) -> None:
    """ConfigError for an unknown top-level key or an unknown key in a fixed section."""
    for key in _keys(config):
        check(key in TOP_LEVEL, key, config[key], f"a known top-level key: {', '.join(TOP_LEVEL)}")
    for name in SECTIONS:
        check(name in config, name, None, f"a config.{name} section")
    for name, known in KNOWN.items():
        for key in _keys(config[name]):
            check(key in known, f"{name}.{key}", config[name][key],
                  f"a known {name} field (one of {', '.join(known)})")


def check_train(config) -> None:
    """config.train: types and ranges of every field the loop and the optimizer read."""
    t = config.train
    get = lambda k, d=None: t.get(k, d)  # noqa: E731
    for name, low in (("steps", 1), ("log_every", 1), ("eval_every", 0), ("eval_batches", 1),
                      ("checkpoint_every", 1), ("keep_checkpoints", 1), ("warmup_steps", 0)):
        value = get(name, 1)
        allowed = f"an int >= {low}" + (" (0 = no evaluation)" if name == "eval_every" else "")
        check(_is_int(value) and value >= low, f"train.{name}", value, allowed)
    steps, warmup = get("steps"), get("warmup_steps", 0)
    check(warmup < steps, "train.warmup_steps", warmup, f"an int in [0, train.steps={steps})")
    lr = get("learning_rate")
    check(_is_real(lr) and lr > 0, "train.learning_rate", lr, "a finite float > 0")
    wd = get("weight_decay", 0.0)
    check(_is_real(wd) and wd >= 0, "train.weight_decay", wd, "a finite float >= 0")
    clip = get("clip_norm", None)
    check(clip is None or (_is_real(clip) and clip >= 0), "train.clip_norm", clip,
          "None or 0 (no clipping), or a finite float > 0")
    for name in ("b1", "b2"):
        value = get(name, 0.9)
        check(_is_real(value) and 0 <= value < 1, f"train.{name}", value, "a float in [0, 1)")
    eps = get("eps", 1e-6)
    check(_is_real(eps) and eps > 0, "train.eps", eps, "a finite float > 0")
    policy = get("nan_policy", "stop")
    check(policy in NAN_POLICIES, "train.nan_policy", policy,
          "'stop' (default: exit 1 at the first non-finite step) or 'skip' (skip and count it)")


def check_data(config) -> None:
    """config.data fields that are otherwise read only after the tokenizer is built."""
    from posjax.data import CORPORA, TOKENIZERS
    from posjax.data.tokenizers import SPECIALS

    d = config.data
    corpus = d.get("corpus", None)
    check(corpus in CORPORA, "data.corpus", corpus, f"one of {', '.join(CORPORA)}")
    path = d.get("path", "") or ""
    check(isinstance(path, str), "data.path", path, "a string path")
    if corpus == "text_dir":
        check(bool(path) and os.path.isdir(path), "data.path", path,
              "an existing directory of UTF-8 *.txt files (data.corpus='text_dir')")
    elif path and corpus in ("peoples_daily", "kjv"):
        check(os.path.isfile(path), "data.path", path, f"an existing file (the {corpus} corpus) or ''")
    if corpus == "synthetic":
        from posjax.data import synthetic

        synthetic.settings(config)  # every generator field, and the one-token-per-word tokenizer
    if corpus == "patches" or d.get("tokenizer", None) == "patch_codes":
        from posjax.data import patches

        patches.check(config)  # images: grid, codes, positions against the scheme
    elif "position" in config and config.position.get("name", None) is not None:
        from posjax.positions import scheme_class

        dims = scheme_class(config.position.name).position_dims
        check(dims == 1, "data.corpus", corpus, f"'patches' for the {dims}-D position "
              f"'{config.position.name}': text gives 1-D positions, it takes (row, column)")
    if corpus == "tfds":
        name = d.get("tfds_name", "")
        check(isinstance(name, str) and bool(name), "data.tfds_name", name,
              "a TFDS dataset name such as 'wikipedia/20230601.en'")
    tok = d.get("tokenizer", "chinese_chars")
    check(tok in TOKENIZERS, "data.tokenizer", tok, f"one of {', '.join(TOKENIZERS)}")
    vocab = d.get("vocab_size", None)
    check(vocab is None or (_is_int(vocab) and vocab > len(SPECIALS)), "data.vocab_size", vocab,
          f"an int > {len(SPECIALS)} (the special tokens)")
    seq_len = d.get("seq_len", None)
    check(_is_int(seq_len) and seq_len >= 3, "data.seq_len", seq_len, "an int >= 3 ([CLS] x [SEP])")
    batch = d.get("batch_size", None)
    check(_is_int(batch) and batch >= 1, "data.batch_size", batch, "a positive int")
    rate = d.get("mask_rate", 0.15)
    check(_is_real(rate) and 0 < rate < 1, "data.mask_rate", rate, "a float in (0, 1)")
    held = d.get("heldout_fraction", 0.0)
    held = 0.0 if held is None else held
    check(_is_real(held) and 0 <= held < 1, "data.heldout_fraction", held, "a float in [0, 1)")
    maxdocs = d.get("max_documents", None)
    check(maxdocs is None or (_is_int(maxdocs) and maxdocs >= 1), "data.max_documents", maxdocs,
          "None or a positive int")
    rml = d.get("randomized_max_length", None)
    check(rml is None or (_is_int(rml) and rml >= seq_len), "data.randomized_max_length", rml,
          f"None or an int >= data.seq_len={seq_len}")
    ww = d.get("whole_word", False)
    check(isinstance(ww, bool), "data.whole_word", ww, "True or False")
    from posjax.data.tasks import mixing

    mixing.check(config)  # config.data.tasks: names, fractions, key length vs scored places


def check_mesh(config, num_devices: Optional[int] = None) -> None:
    """config.mesh field types; with `num_devices`, also that the sizes fit the devices."""
    mesh = config.get("mesh", None)
    if num_devices is None:
        for name in ("data", "fsdp", "tensor"):
            value = mesh.get(name, -1 if name == "data" else 1) if mesh is not None else 1
            check(_is_int(value) and (value == -1 or value >= 1), f"mesh.{name}", value,
                  "a positive int or -1 (= the remaining devices)")
    else:
        shape = mesh_rules.mesh_shape(mesh, num_devices)
        batch = config.data.batch_size
        check(batch % (shape[0] * shape[1]) == 0, "data.batch_size", batch,
              f"a multiple of mesh data*fsdp = {shape[0] * shape[1]}")
    mesh_rules.logical_rules(mesh)


def validate(config, *, num_devices: Optional[int] = None) -> None:
    """Every check, in order: keys, train, data, model + position, mesh. Raises ConfigError.

    Nothing here compiles, allocates device memory or writes to disk. `num_devices` is left
    None by the entry points (multi-host runs may not have initialised JAX yet); the loop
    checks the mesh against the real devices before the first compile.
    """
    check(_is_int(config.get("seed", 0)), "seed", config.get("seed", None), "an int")
    check_keys(config)
    check_train(config)
    check_data(config)
    # Only now: the model checks need jax and flax (~2 s to import), the ones above do not,
    # so a bad train or data field is reported without that wait.
    import posjax.models as models

    models.validate_model_config(config)
    check_mesh(config, num_devices)


__all__ = ["ConfigError", "validate", "check_keys", "check_train", "check_data", "check_mesh"]
