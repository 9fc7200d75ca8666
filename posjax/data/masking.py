"""Masked-language-model corruption: BERT's 15% with 80/10/10, by token or by whole word.

Masks are drawn from a numpy Generator that the caller seeds with (seed, epoch, row index):
the same row gets the same mask when a run is resumed, and a fresh one in the next epoch
(RoBERTa's dynamic masking). Evaluation uses a fixed epoch, hence fixed masks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posjax import schema

EVAL_SEED = 1234  # fixed masks for evaluation, independent of the training seed


def mask_rate(config: Any) -> float:
    """The MLM masking rate; 0 for a causal LM (config.model.causal), whose loss predicts the
    next ORIGINAL token from uncorrupted inputs, so nothing may be masked."""
    view = schema.view(config)
    if view.model.causal:
        return 0.0
    return float(view.data.mask_rate)


def row_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The Generator for one row: independent streams for every (seed, epoch, index)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(epoch), int(index)]))


def max_predictions(length: int, rate: float) -> int:
    """Most tokens `choose` ever picks in a row of `length` tokens (BERT's
    max_predictions_per_seq): round(rate * maskable) with maskable <= length, at least 1.
    Training scores the MLM head only at this many places per row instead of all `length`."""
    if rate <= 0:
        return 0
    return min(int(length), max(1, int(round(int(length) * float(rate)))))


def choose(maskable: np.ndarray, word_starts: np.ndarray, rng: np.random.Generator,
           rate: float, whole_word: bool) -> np.ndarray:
    """Bool [L]: the positions to predict.

    The number of chosen tokens is round(rate * maskable tokens), at least 1 (BERT's
    create_pretraining_data). Whole words are taken in random order while they fit in that
    budget, so a word is always chosen entirely or not at all; a word longer than the budget
    left is skipped (as in BERT), which keeps the rate close to `rate` without splitting words;
    if no word fits at all, one word is taken anyway so that every row predicts something,
    provided it fits in `max_predictions(L, rate)` (the training step scores that many places
    per row, so a longer word would be cut; such a row then predicts nothing).
    """
    maskable = np.asarray(maskable, bool)
    n = int(maskable.sum())
    chosen = np.zeros(maskable.shape, bool)
    if n == 0 or rate <= 0:
        return chosen
    budget = max(1, int(round(n * rate)))
    if not whole_word:
        idx = np.flatnonzero(maskable)
        chosen[rng.choice(idx, size=min(budget, n), replace=False)] = True
        return chosen
    # A unit starts at every word start and at every non-maskable token (a special token ends
    # the word before it). Only units made of maskable tokens are candidates.
    boundary = np.asarray(word_starts, bool) | ~maskable
    boundary[0] = True
    unit = np.cumsum(boundary) - 1
    num_units = int(unit[-1]) + 1
    unit_len = np.bincount(unit, minlength=num_units)
    unit_ok = np.bincount(unit, weights=maskable, minlength=num_units) == unit_len
    candidates = np.flatnonzero(unit_ok)
    picked = np.zeros(num_units, bool)
    total = 0
    order = rng.permutation(candidates)
    for u in order:
        length = int(unit_len[u])
        if total + length > budget:
            continue
        picked[u] = True
        total += length
        if total == budget:
            break
    if total == 0:
        # Every word is longer than the budget: still predict one, if one fits the cap.
        cap = max_predictions(maskable.shape[0], rate)
        fitting = [u for u in order if unit_len[u] <= cap]
        if fitting:
            picked[fitting[0]] = True
    return picked[unit]


def corrupt(ids: np.ndarray, chosen: np.ndarray, rng: np.random.Generator, *, mask_id: int,
            vocab_size: int, num_special: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids, mlm_targets, mlm_weights) for one row.

    Of the chosen tokens 80% become [MASK], 10% a random non-special token, 10% stay as they
    are; all of them are scored. Decided per token, as in BERT and Hugging Face's collators.
    """
    ids = np.asarray(ids, np.int32)
    inputs = ids.copy()
    where = np.flatnonzero(chosen)
    r = rng.random(where.size)
    inputs[where[r < 0.8]] = mask_id
    rand = where[(r >= 0.8) & (r < 0.9)]
    if rand.size and vocab_size > num_special:
        inputs[rand] = rng.integers(num_special, vocab_size, size=rand.size, dtype=np.int32)
    targets = np.where(chosen, ids, 0).astype(np.int32)
    weights = chosen.astype(np.float32)
    return inputs, targets, weights


def mask_row(ids: np.ndarray, word_starts: np.ndarray, maskable: np.ndarray, rng: np.random.Generator,
             *, rate: float, whole_word: bool, mask_id: int, vocab_size: int, num_special: int):
    """choose + corrupt: (input_ids, mlm_targets, mlm_weights)."""
    chosen = choose(maskable, word_starts, rng, rate, whole_word)
    return corrupt(ids, chosen, rng, mask_id=mask_id, vocab_size=vocab_size, num_special=num_special)
