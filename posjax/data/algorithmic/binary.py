"""Context-sensitive tasks on binary numbers: binary_addition, binary_multiplication,
compute_sqrt.

binary_addition  the tape `n 2 m` (L places in all): n and m little-endian (least significant
    bit first), len(n) uniform in 1..L-2, len(m) = L - 1 - len(n), each number uniform in
    1..2**len - 1 (so a number may have high zeros, written out to its length) -> n + m
    little-endian without high zeros, the termination token 2, then 0s: L + 1 places, masked
    after the 2. Example: 0 0 1 2 0 1 1 0 1 (4 + 22) -> 0 1 0 1 1 2 0 0 0 0 (26). For L <= 2 the
    reference draws one number uniform in 0..2**L - 2 written on all L places, with no
    separator, and the answer is that number itself (0 is written as one 0).
binary_multiplication  the same tape -> n * m the same way, but the output has L places
    (n * m has at most L - 1 bits). For L <= 2 the answer is fixed: [2] for L = 1, [0, 2] for
    L = 2 (the reference's placeholder).
compute_sqrt  a number uniform in 1..2**L - 1, big-endian on L places -> floor(sqrt(number)),
    big-endian on ceil(L / 2) places; every place counts.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from posjax.data.algorithmic.base import (AlgorithmicTask, full_mask, register,
                                          termination_mask)

SEPARATOR = END = 2


def le_int(bits) -> int:
    """The number written little-endian in `bits`."""
    return int("".join(str(b) for b in reversed(bits)) or "0", 2)


def le_bits(number: int) -> list[int]:
    """Little-endian bits of `number` without high zeros (0 is [0], as f'{0:b}')."""
    return [int(c) for c in reversed(f"{number:b}")]


def _nonzero_bits(rng, region: np.ndarray) -> np.ndarray:
    """Uniform bits where `region` [batch, L] is True, redrawn until every row has a 1 in each of
    its regions: a uniform number in 1..2**k - 1 on a region of k places."""
    bits = rng.integers(0, 2, region.shape[1:]) * region
    while True:
        zero = ~np.any(bits.astype(bool), axis=-1) & np.any(region, axis=-1)
        if not zero.any():
            return bits.max(axis=0)
        fresh = rng.integers(0, 2, region.shape[1:])
        bits = np.where(zero[..., None] & region, fresh, bits)


def draw_two_numbers(rng: np.random.Generator, batch: int, length: int) -> np.ndarray:
    """The reference's `n 2 m` tapes (L >= 3) or one number on all L places (L <= 2)."""
    if length <= 2:
        numbers = rng.integers(0, 2 ** length - 1, batch)
        return (numbers[:, None] >> np.arange(length)[None, :]) & 1
    split = rng.integers(1, length - 1, batch)  # len(n); the separator's place
    place = np.arange(length)[None, :]
    regions = np.stack([place < split[:, None], place > split[:, None]])  # n's, m's places
    tape = _nonzero_bits(rng, regions)
    tape[np.arange(batch), split] = SEPARATOR
    return tape


def _two_numbers(row: list[int]) -> tuple[int, int]:
    split = row.index(SEPARATOR)
    return le_int(row[:split]), le_int(row[split + 1:])


def _terminated(results: list[list[int]], places: int) -> tuple[np.ndarray, np.ndarray]:
    outputs = np.zeros((len(results), places), np.int32)
    for row, bits in enumerate(results):
        outputs[row, :len(bits)] = bits
        outputs[row, len(bits)] = END
    return outputs, termination_mask(outputs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BinaryAddition(AlgorithmicTask):
    name: str = "binary_addition"
    level: str = "cs"
    output_rule = "L + 1, masked after the termination token 2"
    input_size = property(lambda self: 3)
    output_size = property(lambda self: 3)

    def output_length(self, input_length):
        return input_length + 1

    def _draw(self, rng, batch, length):
        return draw_two_numbers(rng, batch, length)

    def solve(self, inputs):
        length = inputs.shape[1]
        rows = inputs.tolist()
        sums = [le_int(r) if length <= 2 else sum(_two_numbers(r)) for r in rows]
        return _terminated([le_bits(s) for s in sums], length + 1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BinaryMultiplication(AlgorithmicTask):
    name: str = "binary_multiplication"
    level: str = "cs"
    output_rule = "L, masked after the termination token 2"
    input_size = property(lambda self: 3)
    output_size = property(lambda self: 3)

    def output_length(self, input_length):
        return input_length

    def _draw(self, rng, batch, length):
        return draw_two_numbers(rng, batch, length)

    def solve(self, inputs):
        length = inputs.shape[1]
        if length <= 2:
            return _terminated([[0] * (length - 1)] * len(inputs), length)
        products = [math.prod(_two_numbers(r)) for r in inputs.tolist()]
        return _terminated([le_bits(p) for p in products], length)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComputeSqrt(AlgorithmicTask):
    name: str = "compute_sqrt"
    level: str = "cs"
    output_rule = "ceil(L / 2)"
    input_size = property(lambda self: 2)
    output_size = property(lambda self: 2)

    def output_length(self, input_length):
        return math.ceil(input_length / 2)

    def _draw(self, rng, batch, length):
        return _nonzero_bits(rng, np.ones((1, batch, length), bool))

    def solve(self, inputs):
        places = self.output_length(inputs.shape[1])
        outputs = np.zeros((len(inputs), places), np.int32)
        for row, bits in enumerate(inputs.tolist()):
            root = math.isqrt(le_int(bits[::-1]))
            outputs[row] = [int(c) for c in f"{root:0{places}b}"]
        return outputs, full_mask(outputs)


for _task in (BinaryAddition(), BinaryMultiplication(), ComputeSqrt()):
    register(_task)
