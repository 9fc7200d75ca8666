"""posjax.data.algorithmic: the tasks of Delétang et al. 2023 / Ruoss et al. 2023 as their
reference code defines them (google-deepmind/randomized_positional_encodings, tasks/).

Hand-written pairs come from the reference's definitions (its code where its docstring
disagrees); properties are checked on seeded batches at several lengths, 1 and 500 included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posjax.data import algorithmic
from posjax.data.algorithmic import base
from posjax.errors import ConfigError

ALL = algorithmic.names()
NINE = ("reverse_string", "duplicate_string", "missing_duplicate_string", "odds_first",
        "bucket_sort", "binary_addition", "stack_manipulation", "parity_check",
        "modular_arithmetic")
T, F = True, False

# name -> [(input tape, outputs, mask or None for all True)], written out by hand.
PAIRS = {
    "parity_check": [([1, 0, 1, 0, 1, 0, 0], [1], None), ([0, 1, 1, 1, 1], [0], None),
                     ([0], [0], None)],
    "even_pairs": [([0, 0, 1, 1, 1, 0], [0], None), ([0, 1, 0, 1, 0, 0, 1], [1], None)],
    # ids 0, 1, 2 move -1, 0, +1 on a cycle of 5
    "cycle_navigation": [([2, 0, 1, 0, 0], [3], None), ([2, 2, 2, 0], [2], None)],
    # digits 0..4, + 5, - 6, * 7: 1+2*3 = 7; 1-1-1 = -1; 0*1+4*3-2 = 10; 3-2*4 = -5
    "modular_arithmetic": [([1, 5, 2, 7, 3], [2], None), ([1, 6, 1, 6, 1], [4], None),
                           ([0, 7, 1, 5, 4, 7, 3, 6, 2], [0], None),
                           ([3, 6, 2, 7, 4], [0], None), ([4], [4], None)],
    "reverse_string": [([0, 1, 1, 0, 1, 0], [0, 1, 0, 1, 1, 0], None), ([1], [1], None)],
    "duplicate_string": [([1, 0, 1], [1, 0, 1, 1, 0, 1], None), ([0], [0, 0], None)],
    # placeholder 2, padding 3: 0110 0?10 -> 1; 101 1?1 pad -> 0; L = 1 -> 1
    "missing_duplicate_string": [([0, 1, 1, 0, 0, 2, 1, 0], [1], None),
                                 ([1, 0, 1, 1, 2, 1, 3], [0], None), ([2, 1], [1], None),
                                 ([1], [1], None)],
    # the reference's code: 0-based odd places first (its docstring says the other order)
    "odds_first": [([0, 0, 1, 1, 0, 1, 0, 1], [0, 1, 1, 1, 0, 1, 0, 0], None),
                   ([1, 0, 0], [0, 1, 0], None), ([1], [1], None)],
    "bucket_sort": [([1, 0, 2, 0, 4, 1, 1, 2], [0, 0, 1, 1, 1, 2, 2, 4], None),
                    ([3, 3, 0], [0, 3, 3], None)],
    # little-endian n 2 m: 4 + 22 = 26; 9 + 32 = 41; L <= 2: the number itself
    "binary_addition": [([0, 0, 1, 2, 0, 1, 1, 0, 1], [0, 1, 0, 1, 1, 2, 0, 0, 0, 0],
                         [T] * 6 + [F] * 4),
                        ([1, 0, 0, 1, 2, 0, 0, 0, 0, 0, 1], [1, 0, 0, 1, 0, 1, 2, 0, 0, 0, 0, 0],
                         [T] * 7 + [F] * 5),
                        ([1, 2, 1], [0, 1, 2, 0], [T, T, T, F]),
                        ([0, 1], [0, 1, 2], None), ([0, 0], [0, 2, 0], [T, T, F]),
                        ([0], [0, 2], None)],
    # 4 * 22 = 88; 9 * 32 = 288; L <= 2: the reference's fixed placeholder answer
    "binary_multiplication": [([0, 0, 1, 2, 0, 1, 1, 0, 1], [0, 0, 0, 1, 1, 0, 1, 2, 0],
                               [T] * 8 + [F]),
                              ([1, 0, 0, 1, 2, 0, 0, 0, 0, 0, 1],
                               [0, 0, 0, 0, 0, 1, 0, 0, 1, 2, 0], [T] * 10 + [F]),
                              ([1, 2, 1], [1, 2, 0], [T, T, F]),
                              ([1, 0], [0, 2], None), ([0], [2], None)],
    # big-endian: isqrt(37) = 6; isqrt(7) = 2; isqrt(1) = 1
    "compute_sqrt": [([1, 0, 0, 1, 0, 1], [1, 1, 0], None), ([1, 1, 1], [1, 0], None),
                     ([1], [1], None), ([0, 0, 0, 1], [0, 1], None)],
    # stack bottom to top, then 2 POP, 3 PUSH 0, 4 PUSH 1 -> top to bottom, 2, 0s
    "stack_manipulation": [([0, 1, 1, 0, 4, 2, 2], [1, 1, 0, 2, 0, 0, 0, 0], [T] * 4 + [F] * 4),
                           ([1, 1, 0, 2, 2, 2], [2, 0, 0, 0, 0, 0, 0], [T] + [F] * 6),
                           ([1, 2, 2, 3], [0, 2, 0, 0, 0], [T, T, F, F, F]),
                           ([1], [1, 2], None)],
    # digits 0..4, + 5, - 6, * 7, ( 8, ) 9: (3*(-2)) = -6; (1-(4+2)) = -5; -3; ((2+4)*3)
    "modular_arithmetic_brackets": [([8, 3, 7, 8, 6, 2, 9, 9], [4], None),
                                    ([8, 1, 6, 8, 4, 5, 2, 9, 9], [0], None),
                                    ([6, 3], [2], None),
                                    ([8, 8, 2, 5, 4, 9, 7, 3, 9], [3], None)],
    # digits 0..4, + 5, - 6, ( 7, ) 8, x 9, = 10: (x-(2+3))=1; (2-x)=4; x=3; L < 3: 0
    "solve_equation": [([7, 9, 6, 7, 2, 5, 3, 8, 8, 10, 1], [1], None),
                       ([7, 2, 6, 9, 8, 10, 4], [3], None), ([9, 10, 3], [3], None),
                       ([0, 0], [0], None)],
}

SYMBOLS = {"modular_arithmetic": "+-*_", "modular_arithmetic_brackets": "+-*()",
           "solve_equation": "+-()x="}


def text(name: str, row) -> str:
    """A tape of an arithmetic task as Python source (digits, then the task's symbols)."""
    symbols = SYMBOLS[name]
    return "".join(str(t) if t < 5 else symbols[t - 5] for t in row)


def draw(name, length, batch=16, seed=0):
    return algorithmic.get(name).sample(np.random.default_rng(seed), batch, length)


def test_the_registry_holds_the_reference_tasks_with_their_sizes():
    assert set(NINE) <= set(ALL)
    sizes = {name: (algorithmic.get(name).level, algorithmic.get(name).input_size,
                    algorithmic.get(name).output_size) for name in ALL}
    # experiments/constants.py (TASK_BUILDERS, TASK_LEVELS) and each task's sizes
    assert sizes == {
        "parity_check": ("regular", 2, 2), "even_pairs": ("regular", 2, 2),
        "cycle_navigation": ("regular", 3, 5), "modular_arithmetic": ("regular", 9, 5),
        "reverse_string": ("dcf", 2, 2), "stack_manipulation": ("dcf", 5, 3),
        "modular_arithmetic_brackets": ("dcf", 11, 5), "solve_equation": ("dcf", 11, 5),
        "duplicate_string": ("cs", 2, 2), "missing_duplicate_string": ("cs", 4, 2),
        "odds_first": ("cs", 2, 2), "bucket_sort": ("cs", 5, 5),
        "binary_addition": ("cs", 3, 3), "binary_multiplication": ("cs", 3, 3),
        "compute_sqrt": ("cs", 2, 2)}
    lengths = {name: [algorithmic.get(name).output_length(n) for n in (1, 2, 7)] for name in ALL}
    assert lengths["duplicate_string"] == [2, 4, 14]
    assert lengths["binary_addition"] == lengths["stack_manipulation"] == [2, 3, 8]
    assert lengths["binary_multiplication"] == lengths["reverse_string"] == [1, 2, 7]
    assert lengths["compute_sqrt"] == [1, 1, 4]
    assert lengths["parity_check"] == lengths["missing_duplicate_string"] == [1, 1, 1]
    assert all(isinstance(algorithmic.get(name), algorithmic.Task) for name in ALL)


def test_unknown_task_is_one_line_naming_the_tasks():
    with pytest.raises(ConfigError) as error:
        algorithmic.get("reverse")
    message = str(error.value)
    assert message.startswith("data.task='reverse' is not allowed: one of binary_addition, ")
    assert "\n" not in message and all(name in message for name in ALL)
    with pytest.raises(ConfigError, match="data.task='parity_check'"):
        algorithmic.register(algorithmic.get("parity_check"))


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_hand_written_pairs(name):
    task = algorithmic.get(name)
    assert len(PAIRS[name]) >= 2
    for tape, outputs, mask in PAIRS[name]:
        got, got_mask = task.solve(np.array([tape], np.int32))
        assert got.dtype == np.int32 and got_mask.dtype == bool
        assert got.shape == (1, task.output_length(len(tape)))
        assert got[0].tolist() == outputs, tape
        assert got_mask[0].tolist() == (mask or [True] * len(outputs)), tape


@pytest.mark.parametrize("name", ALL)
def test_shapes_dtypes_ranges_and_mask(name):
    task = algorithmic.get(name)
    for length in (1, 2, 3, 4, 5, 8, 41, 500):
        batch = 4 if length == 500 else 16
        s = task.sample(np.random.default_rng(length), batch, length)
        assert isinstance(s, algorithmic.Sample)
        width = task.input_length(length)
        assert s.inputs.shape == (batch, width) and s.inputs.dtype == np.int32
        shape = (batch, task.output_length(width))
        assert s.outputs.shape == s.mask.shape == shape
        assert s.outputs.dtype == np.int32 and s.mask.dtype == bool
        assert 0 <= s.inputs.min() and s.inputs.max() < task.input_size
        assert 0 <= s.outputs.min() and s.outputs.max() < task.output_size
        assert s.mask[:, 0].all()  # the first place always counts
        outputs, mask = task.solve(s.inputs)  # the generator and the solver agree
        np.testing.assert_array_equal(outputs, s.outputs)
        np.testing.assert_array_equal(mask, s.mask)


def test_input_length_is_the_requested_length_except_modular_arithmetic():
    for name in ALL:
        task = algorithmic.get(name)
        expected = [1, 1, 3, 3, 499] if name == "modular_arithmetic" else [1, 2, 3, 4, 500]
        assert [task.input_length(n) for n in (1, 2, 3, 4, 500)] == expected, name


@pytest.mark.parametrize("name", ALL)
def test_seeded_determinism(name):
    a, b, c = draw(name, 20, seed=7), draw(name, 20, seed=7), draw(name, 20, seed=8)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.inputs, c.inputs)


def test_a_seed_gives_these_exact_rows():
    """numpy's PCG64 stream is the same on every machine; a change here changes every dataset."""
    s = draw("parity_check", 12, batch=2, seed=0)
    assert s.inputs.tolist() == [[1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1],
                                 [1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0]]


@pytest.mark.parametrize("length", [1, 2, 7, 500])
def test_string_properties(length):
    batch = 8
    rev = draw("reverse_string", length, batch)
    np.testing.assert_array_equal(rev.outputs[:, ::-1], rev.inputs)  # reversing twice
    dup = draw("duplicate_string", length, batch)
    np.testing.assert_array_equal(dup.outputs[:, :length], dup.inputs)
    np.testing.assert_array_equal(dup.outputs[:, length:], dup.inputs)
    odd = draw("odds_first", length, batch)
    half = length // 2
    np.testing.assert_array_equal(odd.outputs[:, :half], odd.inputs[:, 1::2])
    np.testing.assert_array_equal(odd.outputs[:, half:], odd.inputs[:, ::2])
    srt = draw("bucket_sort", length, batch)
    assert np.all(np.diff(srt.outputs, axis=1) >= 0)
    for i, o in zip(srt.inputs, srt.outputs):
        assert np.array_equal(np.bincount(i, minlength=5), np.bincount(o, minlength=5))
    assert srt.inputs.max() == 4 or length < 50  # the alphabet is 0..4
    for s in (rev, dup, odd, srt):
        assert s.mask.all()


@pytest.mark.parametrize("length", [2, 3, 9, 500])
def test_missing_duplicate_is_one_placeholder_in_a_doubled_string(length):
    s = draw("missing_duplicate_string", length, 32)
    half = length // 2
    assert np.all(np.sum(s.inputs == 2, axis=1) == 1)
    assert np.all(s.inputs[:, 2 * half:] == 3)  # padding only when the length is odd
    assert (s.inputs[:, :2 * half] != 3).all()
    filled = s.inputs[:, :2 * half].copy()
    filled[filled == 2] = s.outputs[:, 0]
    np.testing.assert_array_equal(filled[:, :half], filled[:, half:])
    one = draw("missing_duplicate_string", 1, 4)
    assert one.inputs.tolist() == [[1]] * 4 and one.outputs.tolist() == [[1]] * 4


def _le(bits) -> int:
    return sum(int(b) << i for i, b in enumerate(bits))


@pytest.mark.parametrize("length", [3, 4, 10, 500])
def test_binary_addition_and_multiplication_read_little_endian(length):
    for name, op, places in (("binary_addition", int.__add__, length + 1),
                             ("binary_multiplication", int.__mul__, length)):
        s = draw(name, length, 16)
        assert s.outputs.shape == (16, places)
        for tape, out, mask in zip(s.inputs.tolist(), s.outputs.tolist(), s.mask.tolist()):
            assert tape.count(2) == 1 and 1 <= tape.index(2) <= length - 2
            split = tape.index(2)
            n, m = _le(tape[:split]), _le(tape[split + 1:])
            assert n >= 1 and m >= 1  # each number uniform in 1..2**len - 1
            end = out.index(2)
            assert out[end - 1] == 1 and out[end + 1:] == [0] * (places - end - 1)
            assert _le(out[:end]) == op(n, m)
            assert mask == [True] * (end + 1) + [False] * (places - end - 1)


def test_binary_tasks_at_lengths_one_and_two():
    for length in (1, 2):
        add = draw("binary_addition", length, 64)
        assert (add.inputs != 2).all()  # no separator: one number on all places
        assert set(map(_le, add.inputs.tolist())) == set(range(2 ** length - 1))
        for tape, out in zip(add.inputs.tolist(), add.outputs.tolist()):
            assert _le(out[:out.index(2)]) == _le(tape)
        mul = draw("binary_multiplication", length, 4)
        assert mul.outputs.tolist() == [[0] * (length - 1) + [2]] * 4


@pytest.mark.parametrize("length", [1, 2, 5, 500])
def test_compute_sqrt_is_the_floor_root_big_endian(length):
    s = draw("compute_sqrt", length, 16)
    for tape, out in zip(s.inputs.tolist(), s.outputs.tolist()):
        number = int("".join(map(str, tape)), 2)
        assert number >= 1 and int("".join(map(str, out)), 2) == math.isqrt(number)


@pytest.mark.parametrize("length", [1, 2, 6, 500])
def test_stack_manipulation_runs_the_actions(length):
    s = draw("stack_manipulation", length, 16)
    for tape, out, mask in zip(s.inputs.tolist(), s.outputs.tolist(), s.mask.tolist()):
        stack_length = next((i for i, t in enumerate(tape) if t >= 2), length)
        assert stack_length >= 1 and all(t >= 2 for t in tape[stack_length:])
        stack = tape[:stack_length]
        for action in tape[stack_length:]:
            if action == 2:
                stack = stack[:-1]
            else:
                stack = stack + [action - 3]
        expected = stack[::-1] + [2] + [0] * (length - len(stack))
        assert out == expected
        assert mask == [True] * (len(stack) + 1) + [False] * (length - len(stack))


@pytest.mark.parametrize("length", [1, 2, 8, 500])
def test_regular_tasks_compute_their_definitions(length):
    parity = draw("parity_check", length, 32)
    np.testing.assert_array_equal(parity.outputs[:, 0], parity.inputs.sum(1) % 2)
    pairs = draw("even_pairs", length, 32)
    np.testing.assert_array_equal(pairs.outputs[:, 0], pairs.inputs[:, 0] != pairs.inputs[:, -1])
    cycle = draw("cycle_navigation", length, 32)
    np.testing.assert_array_equal(cycle.outputs[:, 0], (cycle.inputs - 1).sum(1) % 5)
    arith = draw("modular_arithmetic", length, 32)
    assert (arith.inputs[:, ::2] < 5).all() and np.isin(arith.inputs[:, 1::2], [5, 6, 7]).all()
    for tape, out in zip(arith.inputs.tolist(), arith.outputs[:, 0]):
        assert eval(text("modular_arithmetic", tape)) % 5 == out  # Python's precedence


@pytest.mark.parametrize("length", [1, 2, 3, 4, 5, 6, 30, 500])
def test_bracket_expressions_evaluate_as_python_does(length):
    s = draw("modular_arithmetic_brackets", length, 8)
    for tape, out in zip(s.inputs.tolist(), s.outputs[:, 0]):
        source = text("modular_arithmetic_brackets", tape)
        assert source.count("(") == source.count(")")
        assert eval(source) % 5 == out
    assert set(draw("modular_arithmetic_brackets", 40, 64).inputs.ravel()) == set(range(10))


@pytest.mark.parametrize("length", [3, 4, 7, 30, 500])
def test_solve_equation_answers_satisfy_the_equation(length):
    s = draw("solve_equation", length, 8)
    for tape, x in zip(s.inputs.tolist(), s.outputs[:, 0]):
        source = text("solve_equation", tape)
        assert source.count("x") == 1 and source.count("=") == 1 and "*" not in source
        left, right = source.split("=")
        assert len(right) == 1 and eval(left.replace("x", str(x))) % 5 == int(right)
    for short in (1, 2):
        s = draw("solve_equation", short, 4)
        assert (s.inputs == 0).all() and (s.outputs == 0).all()


def test_bad_requests_are_config_errors():
    task = algorithmic.get("parity_check")
    rng = np.random.default_rng(0)
    for batch, length, field in ((4, 0, "length"), (0, 4, "batch"), (4, 2.0, "length"),
                                 (True, 4, "batch")):
        with pytest.raises(ConfigError, match=f"^{field}="):
            task.sample(rng, batch, length)
    with pytest.raises(ConfigError, match="^rng='RandomState'"):
        task.sample(np.random.RandomState(0), 4, 4)


def test_accuracy_and_model_tape_follow_the_reference():
    task = algorithmic.get("binary_addition")
    s = task.sample(np.random.default_rng(1), 8, 6)
    assert base.masked_accuracy(s.outputs, s) == 1.0
    wrong = s.outputs.copy()
    wrong[~s.mask] = 1  # places after the termination token do not count
    assert base.masked_accuracy(wrong, s) == 1.0
    wrong[:, 0] = 1 - np.minimum(s.outputs[:, 0], 1)
    assert base.masked_accuracy(wrong, s) == 1 - 8 / s.mask.sum()
    tape = algorithmic.empty_target_tape(task, s.inputs)
    assert tape.shape == (8, 6 + 7) and tape.dtype == np.int32
    np.testing.assert_array_equal(tape[:, :6], s.inputs)
    assert (tape[:, 6:] == task.input_size).all()
