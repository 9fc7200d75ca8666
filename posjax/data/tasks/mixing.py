"""Task rows mixed into training: config.data.tasks = {'passkey': 0.2, 'copy_span': 0.1}.

Row i of the global training order (posjax.data.pipeline) becomes a task row with probability
sum(fractions), the task picked in proportion to its fraction, its depth uniform in [0, 1]:
all drawn from a Generator seeded with (seed, i) alone, so a resumed run replays the same
rows (the grain iterator state is still just the row index). The filler comes from the
training split. Keys have data.task_digits tokens (default 5); every answer token must be
among the places the train step scores (posjax.data.masking.max_predictions), else the
config is refused rather than train on cut answers.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from posjax.data import masking
from posjax.data.packing import randomized_positions
from posjax.data.tasks import DIGITS, GENERATORS, check_fractions, common, filler_stream
from posjax.errors import ConfigError


def task_digits(config: Any) -> int:
    k = config.data.get("task_digits", None)
    k = DIGITS if k is None else k
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
        raise ConfigError("data.task_digits", k, "an int in [1, 64] (key / answer tokens)")
    return k


def check(config: Any, vocab: Optional[common.Vocab] = None, tokenizer=None) -> dict[str, float]:
    """The fractions of config.data.tasks, after every check that needs no corpus (and, with
    `vocab` or `tokenizer`, the length each task needs at data.seq_len)."""
    fractions = check_fractions(config.data.get("tasks", None))
    if not fractions:
        return fractions
    k = task_digits(config)
    model = config.get("model", None)
    if model is not None and (model.get("causal", False) or model.get("sop", False)):
        raise ConfigError("data.tasks", dict(fractions), "no tasks with model.causal or "
                          "model.sop (task rows are masked-LM questions, one segment)")
    seq_len = int(config.data.seq_len)
    rate = float(config.data.get("mask_rate", 0.15) or 0.15)
    scored = masking.max_predictions(seq_len, rate)
    if k > scored:
        raise ConfigError("data.task_digits", k, f"at most {scored}: the train step scores "
                          f"max_predictions(seq_len={seq_len}, mask_rate={rate}) places a row")
    if vocab is None and tokenizer is not None:
        vocab = common.task_vocab(tokenizer)
    if vocab is not None:
        for name in fractions:
            need = GENERATORS[name].needed(vocab, k)
            if need + 2 > seq_len:
                raise ConfigError("data.seq_len", seq_len, f"at least {need + 2} for task "
                                  f"{name} with {k}-token keys (statements, cue, [CLS], [SEP])")
    return fractions


def make_mixer(config: Any, tokenizer, tokens: np.ndarray, seed: int,
               randomized_max_length: Optional[int] = None) -> Optional[Callable]:
    """index -> a task row (dict, batch contract) or None (keep the MLM row); None when
    config.data.tasks is empty. `tokens`: the training split's tokens (filler)."""
    if not check(config):
        return None
    vocab = common.task_vocab(tokenizer)
    fractions = check(config, vocab)
    names = list(fractions)
    edges = np.cumsum([fractions[n] for n in names])
    stream = filler_stream(tokens, vocab, tokenizer.num_special)
    k, length = task_digits(config), int(config.data.seq_len)

    def mix(index: int):
        rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 21,
                                                            int(index)]))
        pick = int(np.searchsorted(edges, rng.random(), side="right"))
        if pick >= len(names):
            return None
        row, _ = GENERATORS[names[pick]].make(vocab, stream, length, float(rng.random()), rng, k)
        if randomized_max_length:
            row["positions"] = randomized_positions(rng, length, randomized_max_length)
        return row

    return mix
