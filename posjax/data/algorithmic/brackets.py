"""The bracketed expression tasks (deterministic context-free): modular_arithmetic_brackets and
solve_equation, both mod 5.

An expression of exactly n symbols is drawn as the reference's
`generate_one_expression_and_result`: n = 1 `d`, 2 `-d`, 3 `(d)`, 4 `(-d)` with a uniform digit
d; n >= 5 `(A op B)` with len(A) uniform in 1..n-4, len(B) = n - 3 - len(A) and op uniform in
{+, -, *} (modular_arithmetic_brackets, as the paper's runs: mult=True) or {+, -}
(solve_equation). Built with an explicit stack, so any length works (no recursion limit).

modular_arithmetic_brackets  the expression of length L -> its value mod 5. Ids: digits 0..4,
    5 '+', 6 '-', 7 '*', 8 '(', 9 ')'; the input size is 11 as the reference's (its 'x' and '='
    ids, 10 and 11, never occur).
solve_equation  an expression of length L - 2 in which one digit is replaced by 'x', then
    '=' and the value: `(x-(2+3))=1` -> 1, the replaced digit. The digit is found as the
    reference does: a uniform place, then the first digit from there on (cyclically), so
    digits after long runs of symbols are picked more often. Ids: digits 0..4, 5 '+', 6 '-',
    7 '(', 8 ')', 9 'x', 10 '='; input size 11. For L < 3 the reference returns all-zero
    tapes with answer 0, and so does this.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from posjax.data.algorithmic.base import AlgorithmicTask, Sample, check_request, register, single

_PRECEDENCE = {"neg": 3, "*": 2, "+": 1, "-": 1}
# The expressions of 1 to 4 symbols around one digit d: d, -d, (d), (-d).
_LEAVES = {1: ([], []), 2: (["-"], []), 3: (["("], [")"]), 4: (["(", "-"], [")"])}


def expression(rng: np.random.Generator, length: int, modulus: int, ops: str) -> tuple[list, int]:
    """(symbols, value): digits as ints, the rest as one-character strings."""
    symbols, values = [], []
    todo = [("expr", length)]
    while todo:
        kind, item = todo.pop()
        if kind == "symbol":
            symbols.append(item)
        elif kind == "close":  # both operands are done: close the bracket, combine them
            symbols.append(")")
            right, left = values.pop(), values.pop()
            values.append(_apply(item, left, right) % modulus)
        elif item <= 4:
            digit = int(rng.integers(0, modulus))
            symbols += _LEAVES[item][0] + [digit] + _LEAVES[item][1]
            values.append(-digit % modulus if item in (2, 4) else digit)
        else:
            left = int(rng.integers(1, item - 3))
            op = ops[int(rng.integers(0, len(ops)))]
            symbols.append("(")
            todo += [("close", op), ("expr", item - 3 - left), ("symbol", op), ("expr", left)]
    return symbols, values[0]


def _apply(op, left, right=None):
    if op == "neg":
        return -left
    return left + right if op == "+" else left - right if op == "-" else left * right


def evaluate(symbols, modulus: int) -> int:
    """Value mod `modulus` of an expression in the reference's grammar (digits as ints, the rest
    as characters), read with precedence and unary minus, without recursion."""
    values, ops = [], []

    def reduce():
        op = ops.pop()
        if op == "neg":
            values.append(_apply(op, values.pop()) % modulus)
        else:
            right, left = values.pop(), values.pop()
            values.append(_apply(op, left, right) % modulus)

    operand_before = False
    for s in symbols:
        if isinstance(s, int):
            values.append(s % modulus)
            operand_before = True
        elif s == "(":
            ops.append(s)
            operand_before = False
        elif s == ")":
            while ops[-1] != "(":
                reduce()
            ops.pop()
            operand_before = True
        elif s == "-" and not operand_before:
            ops.append("neg")
        else:
            while ops and ops[-1] != "(" and _PRECEDENCE[ops[-1]] >= _PRECEDENCE[s]:
                reduce()
            ops.append(s)
            operand_before = False
    while ops:
        reduce()
    (value,) = values
    return value


def _ids(symbols: str, modulus: int) -> dict:
    return {s: modulus + i for i, s in enumerate(symbols)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModularArithmeticBrackets(AlgorithmicTask):
    name: str = "modular_arithmetic_brackets"
    level: str = "dcf"
    modulus: int = 5
    mult: bool = True
    input_size = property(lambda self: self.modulus + 6)
    output_size = property(lambda self: self.modulus)

    @property
    def symbols(self) -> dict:
        return _ids("+-*()x=", self.modulus)

    def sample(self, rng, batch, length):
        check_request(rng, batch, length)
        ids = self.symbols
        ops = "+-*" if self.mult else "+-"
        rows = [expression(rng, length, self.modulus, ops) for _ in range(batch)]
        inputs = np.array([[s if isinstance(s, int) else ids[s] for s in symbols]
                           for symbols, _ in rows], np.int32)
        return Sample(inputs, *single([value for _, value in rows]))

    def solve(self, inputs):
        names = {i: s for s, i in self.symbols.items()}
        return single([evaluate([names.get(t, t) for t in row], self.modulus)
                       for row in inputs.tolist()])


@dataclasses.dataclass(frozen=True, kw_only=True)
class SolveEquation(AlgorithmicTask):
    name: str = "solve_equation"
    level: str = "dcf"
    modulus: int = 5
    input_size = property(lambda self: self.modulus + 6)
    output_size = property(lambda self: self.modulus)

    @property
    def symbols(self) -> dict:
        return _ids("+-()x=", self.modulus)

    def sample(self, rng, batch, length):
        check_request(rng, batch, length)
        if length < 3:
            return Sample(np.zeros((batch, length), np.int32), *single(np.zeros(batch)))
        ids, inputs, answers = self.symbols, [], []
        for _ in range(batch):
            symbols, value = expression(rng, length - 2, self.modulus, "+-")
            place = int(rng.integers(0, length - 2))
            while not isinstance(symbols[place], int):
                place = (place + 1) % (length - 2)
            answers.append(symbols[place])
            symbols[place] = "x"
            inputs.append([s if isinstance(s, int) else ids[s] for s in symbols]
                          + [ids["="], value])
        return Sample(np.array(inputs, np.int32), *single(answers))

    def solve(self, inputs):
        """The x that makes each equation hold (one exists and it is unique: x enters with
        coefficient +1 or -1)."""
        if inputs.shape[1] < 3:
            return single(np.zeros(len(inputs)))
        names = {i: s for s, i in self.symbols.items()}
        answers = []
        for row in inputs.tolist():
            left = [names.get(t, t) for t in row[:-2]]
            answers.append(next(x for x in range(self.modulus) if evaluate(
                [x if s == "x" else s for s in left], self.modulus) == row[-1]))
        return single(answers)


for _task in (ModularArithmeticBrackets(), SolveEquation()):
    register(_task)
