"""Start-up of a training run, before anything compiles: the workdir rules, config.json, the
vocabulary (built or read back, checked against the one the run started with) and the
metrics.jsonl file. Multi-process runs write on process 0 only."""

from __future__ import annotations

import json
import sys

import jax
import numpy as np

from posjax import data, models, storage
from posjax.config import validation
from posjax.errors import ConfigError
from posjax.training import multihost
from posjax.training import workdir as workdir_lib


def set_up_workdir(config, workdir: str):
    """Steps 1-2 (no compile): returns (resume_step or None, tokenizer). Mutates config.

    Multi-process: process 0 applies the workdir rules and writes config.json and vocab.txt
    first; the others wait at a barrier, then read them (and write nothing).
    """
    if jax.process_count() > 1 and not multihost.is_primary():
        multihost.sync("posjax_prepare")
        return _set_up(config, workdir, write=False)
    out = _set_up(config, workdir, write=True)
    multihost.sync("posjax_prepare")
    return out


def _set_up(config, workdir: str, write: bool):
    validation.validate(config)  # every field, before touching the workdir
    resume_step = workdir_lib.apply_rules(config, workdir)
    fresh = not storage.exists(storage.join(workdir, workdir_lib.CONFIG_FILE))
    if fresh and write:
        workdir_lib.save_config(config, workdir)  # marks the workdir as ours before writing more
    tokenizer = data.load_or_build(config, workdir)
    with config.unlocked():
        config.model.vocab_size = int(tokenizer.vocab_size)
        if "data" in config and "vocab_size" in config.data and config.data.vocab_size is None:
            config.data.vocab_size = int(tokenizer.vocab_size)
    models.validate_model_config(config, require_vocab=True)
    _check_vocab(tokenizer, workdir, write)
    if write:
        _check_metrics(workdir)
    if not fresh:
        workdir_lib.compare_configs(workdir_lib.read_config_dict(workdir),
                                    workdir_lib.config_dict(config), workdir)
    if write:
        workdir_lib.save_config(config, workdir)
    return resume_step, tokenizer


VOCAB_FINGERPRINT = "vocab.fingerprint"


def _check_vocab(tokenizer, workdir: str, write: bool) -> None:
    """vocab.txt must be the vocabulary the run started with (same size AND same tokens).

    The first run records '<size> <fingerprint>' next to vocab.txt; a later run whose
    vocab.txt was edited, replaced or regenerated differently gets a ConfigError naming
    vocab.txt instead of training (or evaluating) on silently shuffled ids.
    """
    path = storage.join(workdir, VOCAB_FINGERPRINT)
    if storage.exists(path):
        try:
            size, _, fingerprint = storage.read_bytes(path).decode("utf-8").strip().partition(" ")
            size = int(size)
        except ValueError:  # damaged (UnicodeDecodeError is a ValueError too)
            raise ConfigError(VOCAB_FINGERPRINT, path, "'<size> <fingerprint>' as train.py wrote "
                              "it (the file is damaged; delete it to accept vocab.txt as it is, "
                              "or restore it)") from None
        data.check_vocab(tokenizer, size, fingerprint or None)
    elif write:
        storage.write_text(path, f"{tokenizer.vocab_size} {tokenizer.fingerprint()}\n")


def _check_metrics(workdir: str) -> None:
    """A damaged metrics.jsonl is kept as it is (nothing written is ever dropped), with a
    warning; a last line cut short (a kill mid-write, a full disk) gets its newline, so the
    lines this run appends stay whole."""
    path = storage.join(workdir, METRICS_FILE)
    if not storage.isfile(path):
        return
    raw = storage.read_bytes(path)
    bad = []
    for i, line in enumerate(raw.split(b"\n"), 1):
        if line.strip():
            try:
                json.loads(line.decode("utf-8"))
            except ValueError:
                bad.append(i)
    if bad:
        warn(f"{path}: {len(bad)} line(s) are not valid JSON (first: line {bad[0]}); kept as "
              "they are, new lines are appended after them")
    if raw and not raw.endswith(b"\n"):
        storage.append_text(path, "\n")


def on_primary_first(build, name: str):
    """Run `build` on process 0, then on the others (it may write caches into the workdir)."""
    if multihost.is_primary():
        out = build()
        multihost.sync(name)
        return out
    multihost.sync(name)
    return build()


METRICS_FILE = "metrics.jsonl"


def warn(line: str) -> None:
    """A warning the user must see (stderr, one line, no logging prefix)."""
    sys.stderr.write(f"warning: {line}\n")
    sys.stderr.flush()


def append_metrics(workdir: str, values: dict) -> None:
    """One JSON line per logged step in <workdir>/metrics.jsonl, floats at full precision.

    'step_loss' is the loss of that single step (as the device computed it, float32), 'loss'
    the mean of the log window. A resumed run appends, so steps re-run after an interruption
    appear again (with the same values: resume is exact).
    """
    line = json.dumps({k: (float(v) if isinstance(v, (float, np.floating)) else v)
                       for k, v in sorted(values.items())})
    storage.append_text(storage.join(workdir, METRICS_FILE), line + "\n")
