"""Context-sensitive string tasks: duplicate_string, missing_duplicate_string, odds_first,
bucket_sort. (The binary-number tasks are in binary.py.)

duplicate_string  bits s -> s s (output length 2L).
missing_duplicate_string  a bit string w of length L // 2 written twice, one of the 2 * (L // 2)
    places (uniform) replaced by the placeholder 2, then one padding token 3 when L is odd (so
    the tape has exactly L places) -> the replaced bit. L = 1: the reference's fixed row,
    input 1 -> answer 1. Input size 4, output size 2.
odds_first  s_1 s_2 ... s_L -> the tokens at 0-based odd places first, then those at 0-based
    even places: x[1::2] then x[::2], so 0 0 1 1 0 1 0 1 -> 0 1 1 1 0 1 0 0. This follows the
    reference's CODE; its docstring (s_1 s_3 s_5 ... first, example 00110101 -> 0100 0111) says
    the opposite order.
bucket_sort  tokens from 0..4 -> the same tokens sorted increasingly (output length L).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from posjax.data.algorithmic.base import (AlgorithmicTask, StringTask, full_mask, register,
                                          single)

PLACEHOLDER, PADDING = 2, 3


def _same_shape_answer(outputs) -> tuple[np.ndarray, np.ndarray]:
    outputs = np.ascontiguousarray(outputs, np.int32)
    return outputs, full_mask(outputs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DuplicateString(StringTask):
    name: str = "duplicate_string"
    level: str = "cs"
    output_rule = "2L"

    def output_length(self, input_length):
        return 2 * input_length

    def solve(self, inputs):
        return _same_shape_answer(np.concatenate([inputs, inputs], axis=1))


@dataclasses.dataclass(frozen=True, kw_only=True)
class MissingDuplicateString(AlgorithmicTask):
    name: str = "missing_duplicate_string"
    level: str = "cs"
    input_size = property(lambda self: 4)
    output_size = property(lambda self: 2)

    def _draw(self, rng, batch, length):
        if length == 1:
            return np.ones((batch, 1), np.int32)
        half = length // 2
        bits = rng.integers(0, 2, (batch, half))
        tape = np.full((batch, length), PADDING, np.int32)
        tape[:, :2 * half] = np.concatenate([bits, bits], axis=1)
        tape[np.arange(batch), rng.integers(0, 2 * half, batch)] = PLACEHOLDER
        return tape

    def solve(self, inputs):
        batch, length = inputs.shape
        if length == 1:
            return single(np.ones(batch))
        half = length // 2
        place = np.argmax(inputs == PLACEHOLDER, axis=1)
        twin = np.where(place < half, place + half, place - half)
        return single(inputs[np.arange(batch), twin])


@dataclasses.dataclass(frozen=True, kw_only=True)
class OddsFirst(StringTask):
    name: str = "odds_first"
    level: str = "cs"

    def solve(self, inputs):
        return _same_shape_answer(np.concatenate([inputs[:, 1::2], inputs[:, ::2]], axis=1))


@dataclasses.dataclass(frozen=True, kw_only=True)
class BucketSort(StringTask):
    name: str = "bucket_sort"
    level: str = "cs"
    vocab_size: int = 5

    def solve(self, inputs):
        return _same_shape_answer(np.sort(inputs, axis=1))


for _task in (DuplicateString(), MissingDuplicateString(), OddsFirst(), BucketSort()):
    register(_task)
