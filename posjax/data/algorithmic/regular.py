"""The regular tasks (controls): one answer per row, every place of the input counts.

parity_check        bits -> their sum mod 2.
even_pairs          bits -> the number of unequal neighbours (01 or 10) mod 2, which is
                    1 exactly when the first and last bit differ.
cycle_navigation    actions {0, 1, 2} move -1, 0, +1 on a cycle of 5 from 0 -> the final state.
                    The reference's docstring speaks of actions 0 (stay), 1 (right), -1 (left);
                    its code draws ids 0..2 and moves by id - 1, which is what is done here.
modular_arithmetic  `n op n op ... n` with n in 0..4 and op in {+, *, -} (uniform), evaluated
                    with the usual precedence (* before + and -) mod 5. Ids: n for a digit,
                    5 + for '+', 6 '-', 7 '*', 8 the reference's blank '_' (counted in the
                    input size, never drawn). The tape has odd length: an even requested
                    length L gives a tape of L - 1 (the reference subtracts one).
                    The reference multiplies in int32 before taking the modulus, so a chain of
                    ~20 or more nonzero factors could wrap there (chance about 3**-20 per
                    place); here every product is reduced mod 5 and always exact.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from posjax.data.algorithmic.base import AlgorithmicTask, register, single

# Operator ids above the modulus, as the reference's OP_BY_CHARACTER: + - * and the blank _.
PLUS, MINUS, TIMES, BLANK = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParityCheck(AlgorithmicTask):
    name: str = "parity_check"
    level: str = "regular"
    input_size = property(lambda self: 2)
    output_size = property(lambda self: 2)

    def solve(self, inputs):
        return single(np.sum(inputs, axis=1) % 2)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvenPairs(AlgorithmicTask):
    name: str = "even_pairs"
    level: str = "regular"
    input_size = property(lambda self: 2)
    output_size = property(lambda self: 2)

    def solve(self, inputs):
        return single(np.sum(inputs[:, 1:] != inputs[:, :-1], axis=1) % 2)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CycleNavigation(AlgorithmicTask):
    name: str = "cycle_navigation"
    level: str = "regular"
    cycle: int = 5
    input_size = property(lambda self: 3)
    output_size = property(lambda self: self.cycle)

    def _draw(self, rng, batch, length):
        return rng.integers(0, 3, (batch, length))

    def solve(self, inputs):
        return single(np.sum(inputs.astype(np.int64) - 1, axis=1) % self.cycle)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModularArithmetic(AlgorithmicTask):
    name: str = "modular_arithmetic"
    level: str = "regular"
    modulus: int = 5
    input_rule = "L, or L - 1 when L is even"
    input_size = property(lambda self: self.modulus + 4)
    output_size = property(lambda self: self.modulus)

    def input_length(self, length):
        return length if length % 2 else length - 1

    def _draw(self, rng, batch, length):
        length = self.input_length(length)
        tape = np.empty((batch, length), np.int64)
        tape[:, ::2] = rng.integers(0, self.modulus, (batch, length // 2 + 1))
        ops = self.modulus + np.array([PLUS, TIMES, MINUS])
        tape[:, 1::2] = ops[rng.integers(0, 3, (batch, length // 2))]
        return tape

    def solve(self, inputs):
        m = self.modulus
        values = inputs[:, ::2].astype(np.int64)
        ops = inputs[:, 1::2] - m
        # A blank stands for 0 as a number and '+' as an operator (the reference's rule).
        values = np.where(values == m + BLANK, 0, values)
        ops = np.where(ops == BLANK, PLUS, ops)
        total = np.zeros(len(inputs), np.int64)
        term = values[:, 0] % m
        for k in range(ops.shape[1]):  # left to right: a product term ends at + or -
            op, value = ops[:, k], values[:, k + 1]
            times = op == TIMES
            total = np.where(times, total, (total + term) % m)
            term = np.where(times, term * value % m, np.where(op == MINUS, -value % m, value))
        return single((total + term) % m)


for _task in (ParityCheck(), EvenPairs(), CycleNavigation(), ModularArithmetic()):
    register(_task)
