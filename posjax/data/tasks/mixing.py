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

from posjax import schema
from posjax.data import masking, pose
from posjax.data.packing import randomized_positions
from posjax.data.tasks import GENERATORS, check_fractions, common, filler_stream
from posjax.errors import ConfigError


def task_digits(config: Any) -> int:
    return schema.check_value("data.task_digits", schema.view(config).data.task_digits)


def check(config: Any, vocab: Optional[common.Vocab] = None, tokenizer=None) -> dict[str, float]:
    """The fractions of config.data.tasks, after every check that needs no corpus (and, with
    `vocab` or `tokenizer`, the length each task needs at data.seq_len)."""
    view = schema.view(config)
    fractions = check_fractions(view.data.tasks)
    if not fractions:
        return fractions
    k = task_digits(config)
    if view.model.causal or view.model.sop:
        raise ConfigError("data.tasks", dict(fractions), "no tasks with model.causal or "
                          "model.sop (task rows are masked-LM questions, one segment)")
    seq_len = int(config.data.seq_len)
    rate = float(view.data.mask_rate)
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
               randomized_max_length: Optional[int] = None, pose_target_length: int = 0,
               pose_chunks: int = 2) -> Optional[Callable]:
    """index -> a task row (dict, batch contract) or None (keep the MLM row); None when
    config.data.tasks is empty. `tokens`: the training split's tokens (filler). The position
    modifiers (randomized, or PoSE with pose_target_length > 0) treat the row as one example."""
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
        elif pose_target_length:
            row["positions"] = pose.pose_positions(rng, length, pose_target_length, pose_chunks)
        return row

    return mix
