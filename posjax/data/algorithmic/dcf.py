"""Deterministic context-free tasks over tapes: reverse_string and stack_manipulation.

reverse_string      bits s_1..s_L -> s_L..s_1 (output length L).
stack_manipulation  a stack of bits given bottom to top (ids 0, 1), then actions 2 = POP (ignored
                    on an empty stack), 3 = PUSH 0, 4 = PUSH 1 -> the final stack top to bottom,
                    then the termination token 2, then 0s up to length L + 1. The stack part
                    has a uniform length in 1..L-1 and the rest are actions; L = 1 is one bit
                    and no action. The mask (the reference's accuracy mask) is True up to and
                    including the termination token.
The brackets tasks (modular_arithmetic_brackets, solve_equation) live in brackets.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from posjax.data.algorithmic.base import (AlgorithmicTask, StringTask, full_mask, register,
                                          termination_mask)

POP, PUSH0, PUSH1 = 2, 3, 4


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReverseString(StringTask):
    name: str = "reverse_string"
    level: str = "dcf"

    def solve(self, inputs):
        outputs = np.ascontiguousarray(inputs[:, ::-1], np.int32)
        return outputs, full_mask(outputs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StackManipulation(AlgorithmicTask):
    name: str = "stack_manipulation"
    level: str = "dcf"
    output_rule = "L + 1, masked after the termination token 2"
    input_size = property(lambda self: 5)
    output_size = property(lambda self: 3)

    def output_length(self, input_length):
        return input_length + 1

    def _draw(self, rng, batch, length):
        if length == 1:
            return rng.integers(0, 2, (batch, 1))
        stack = rng.integers(1, length, batch)  # how many of the L places hold the stack
        bits = rng.integers(0, 2, (batch, length))
        actions = rng.integers(POP, PUSH1 + 1, (batch, length))
        return np.where(np.arange(length)[None, :] < stack[:, None], bits, actions)

    def solve(self, inputs):
        batch, length = inputs.shape
        outputs = np.zeros((batch, length + 1), np.int32)
        for row, tape in enumerate(inputs.tolist()):
            stack = []
            for token in tape:
                if token < POP:
                    stack.append(token)
                elif token == POP:
                    if stack:
                        stack.pop()
                else:
                    stack.append(token - PUSH0)
            outputs[row, :len(stack)] = stack[::-1]
            outputs[row, len(stack)] = 2
        return outputs, termination_mask(outputs)


for _task in (ReverseString(), StackManipulation()):
    register(_task)
