"""A stand-in algorithmic task for the tape, curriculum and model tests: they test posjax's
plumbing, not a task's answers (tests/data/test_algorithmic*.py test those)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Sample(NamedTuple):
    inputs: np.ndarray
    outputs: np.ndarray
    mask: np.ndarray


class ReverseWithEnd:
    """Reverse a binary string, then an end token (class 2) and one padding 0: outputs of
    n + 2 places, of which the mask keeps the first n + 1 (so masked-out places exist)."""

    name = "reverse_with_end"
    level = "dcf"
    input_size = 2
    output_size = 3

    def output_length(self, input_length: int) -> int:
        return input_length + 2

    def sample(self, rng: np.random.Generator, batch: int, length: int) -> Sample:
        inputs = rng.integers(0, 2, size=(batch, length)).astype(np.int32)
        outputs = np.concatenate([inputs[:, ::-1], np.full((batch, 1), 2, np.int32),
                                  np.zeros((batch, 1), np.int32)], axis=1)
        mask = np.ones(outputs.shape, bool)
        mask[:, -1] = False
        return Sample(inputs, outputs, mask)
