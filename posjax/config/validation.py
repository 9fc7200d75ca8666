"""validate(config): every config check in one call, before anything touches disk or compiles.

Each field's own check (type, range, choices) is declared with the field in posjax.schema;
the checks across fields live next to the code that relies on them (models.validate_model_config
for config.model + config.position, the data pipeline's checks, mesh_rules.mesh_shape and
logical_rules for config.mesh); this module adds what no package owned (config.train ranges,
the data fields read only later, unknown keys) and calls all of them in a fixed order, so a
wrong config fails in about a second with one ConfigError naming the field, the value and what
is allowed. train.py calls it first and prints that as one line with exit code 2.

Unknown keys are errors: a typo in a config file (`t.checkpoint_evry = 10`) would otherwise be
ignored silently. Command-line overrides are checked earlier, by posjax.config.overrides.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from posjax import mesh_rules, schema
from posjax.data import curriculum, patches, pose, synthetic
from posjax.data.tasks import mixing
from posjax.errors import ConfigError, check

SECTIONS, TOP_LEVEL, KNOWN = schema.SECTIONS, schema.TOP_LEVEL, schema.KNOWN
NAN_POLICIES = schema.NAN_POLICIES


def _keys(section: Any) -> list:
    try:
        return list(section.keys())
    except AttributeError:
        return []


def _nearest(key: str, known) -> str:
    """'nearest: a, b; ' for the declared keys closest to `key` ('' when none is close)."""
    close = schema.nearest(key, known)
    return f"nearest: {', '.join(close)}; " if close else ""


def check_keys(config) -> None:
    """ConfigError for an unknown top-level key or an unknown key in a fixed section."""
    for key in _keys(config):
        check(key in TOP_LEVEL, key, config[key],
              f"a known top-level key ({_nearest(key, TOP_LEVEL)}one of {', '.join(TOP_LEVEL)})")
    for name in SECTIONS:
        check(name in config, name, None, f"a config.{name} section")
    for name, known in KNOWN.items():
        for key in _keys(config[name]):
            check(key in known, f"{name}.{key}", config[name][key],
                  f"a known {name} field ({_nearest(key, known)}one of {', '.join(known)})")


def check_train(config) -> None:
    """config.train: types and ranges of every field the loop and the optimizer read."""
    for name in ("steps", "log_every", "eval_every", "eval_batches", "checkpoint_every",
                 "keep_checkpoints", "warmup_steps"):
        schema.checked(config, f"train.{name}")
    schema.check_warmup(schema.view(config).train)
    for name in ("learning_rate", "weight_decay", "clip_norm", "b1", "b2", "eps", "nan_policy",
                 "schedule", "no_decay"):
        schema.checked(config, f"train.{name}")


def check_data(config) -> None:
    """config.data fields that are otherwise read only after the tokenizer is built."""
    corpus = schema.checked(config, "data.corpus")
    path = schema.checked(config, "data.path") or ""
    if corpus == "text_dir":
        check(bool(path) and os.path.isdir(path), "data.path", path,
              "an existing directory of UTF-8 *.txt files (data.corpus='text_dir')")
    elif path and corpus in ("peoples_daily", "kjv"):
        check(os.path.isfile(path), "data.path", path, f"an existing file (the {corpus} corpus) or ''")
    if corpus == "synthetic":
        synthetic.settings(config)  # every generator field, and the one-token-per-word tokenizer
    if corpus == "algorithmic" or schema.value(config, "data.tokenizer") == "task_symbols":
        curriculum.check_config(config)  # the task, its tape against seq_len, the class head
    if corpus == "patches" or schema.value(config, "data.tokenizer") == "patch_codes":
        patches.check(config)  # images: grid, codes, positions against the scheme
    elif schema.given(config, "position.name") is not None:
        from posjax.positions import scheme_class

        dims = scheme_class(config.position.name).position_dims
        check(dims == 1, "data.corpus", corpus, f"'patches' for the {dims}-D position "
              f"'{config.position.name}': text gives 1-D positions, it takes (row, column)")
    if corpus == "tfds":
        name = schema.checked(config, "data.tfds_name")
        check(bool(name), "data.tfds_name", name, schema.field("data.tfds_name").allowed)
    for name in ("tokenizer", "vocab_size", "seq_len", "batch_size", "mask_rate",
                 "heldout_fraction", "max_documents"):
        schema.checked(config, f"data.{name}")
    seq_len = schema.value(config, "data.seq_len")
    rml = schema.value(config, "data.randomized_max_length")
    check(rml is None or (schema.is_int(rml) and rml >= seq_len), "data.randomized_max_length", rml,
          f"None or an int >= data.seq_len={seq_len}")
    for name in ("whole_word", "tfds_split", "tfds_text_key", "randomized_eval", "split_seed",
                 "cache_dir", "synthetic", "tasks", "patches", "randomized_layers"):
        schema.checked(config, f"data.{name}")
    pose.check_config(config)  # PoSE: its window, its chunks, and not with randomized positions
    layers = schema.value(config, "data.randomized_layers")
    check(not layers or (rml is not None and corpus == "algorithmic"), "data.randomized_layers",
          layers, "False, or True with data.randomized_max_length set on the 'algorithmic' "
          "corpus (its tapes carry a draw per layer)")
    mixing.check(config)  # config.data.tasks: names, fractions, key length vs scored places


def check_mesh(config, num_devices: Optional[int] = None) -> None:
    """config.mesh field types; with `num_devices`, also that the sizes fit the devices."""
    mesh = schema.view(config).mesh
    if num_devices is None:
        for name in ("data", "fsdp", "tensor"):
            schema.checked(config, f"mesh.{name}")
    else:
        shape = mesh_rules.mesh_shape(mesh, num_devices)
        batch = config.data.batch_size
        check(batch % (shape[0] * shape[1]) == 0, "data.batch_size", batch,
              f"a multiple of mesh data*fsdp = {shape[0] * shape[1]}")
    mesh_rules.logical_rules(mesh)


def validate(config, *, num_devices: Optional[int] = None) -> None:
    """Every check, in order: keys, train, data, model + position, mesh, then each declared
    field's own check (posjax.schema) for the fields none of those reads. Raises ConfigError.

    Nothing here compiles, allocates device memory or writes to disk. `num_devices` is left
    None by the entry points (multi-host runs may not have initialised JAX yet); the loop
    checks the mesh against the real devices before the first compile.
    """
    schema.checked(config, "seed")
    check_keys(config)
    check_train(config)
    check_data(config)
    # Only now: the model checks need jax and flax (~2 s to import), the ones above do not,
    # so a bad train or data field is reported without that wait.
    import posjax.models as models

    models.validate_model_config(config)
    check_mesh(config, num_devices)
    schema.check_all(config)


__all__ = ["ConfigError", "validate", "check_keys", "check_train", "check_data", "check_mesh"]
