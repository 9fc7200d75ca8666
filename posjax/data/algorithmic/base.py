"""What every algorithmic task shares: the sample, the task interface, the registry.

The tasks reproduce the length-generalization benchmark of Delétang et al. (ICLR 2023) and
Ruoss et al. (ACL 2023), following the code of google-deepmind/randomized_positional_encodings
(`tasks/`, `experiments/`), which agrees with google-deepmind/neural_networks_chomsky_hierarchy
on every task. The reference one-hot encodes its arrays; here they are class ids.

How the reference scores a sample (`experiments/example.py`), which a reproduction must copy:

- loss: per output place the cross-entropy against the target, averaged over the batch AND
  every output place, padding after a termination token included. `Sample.mask` does not
  enter the reference loss.
- accuracy: per place argmax == target, summed over the places where `mask` is True and
  divided by the number of such places in the whole batch (`masked_accuracy`). The range
  evaluation averages that over sub-batches of 64 rows.
- model input (`make_model_with_empty_targets`, no computation steps): the input tape followed
  by `output_length` copies of an empty token whose id is `input_size`; the model's outputs
  at those last places are the predictions (`empty_target_tape`).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from posjax.errors import ConfigError, check

LEVELS = ("regular", "dcf", "cs")


class Sample(NamedTuple):
    inputs: np.ndarray  # [batch, input_length(length)] int32 in [0, input_size)
    outputs: np.ndarray  # [batch, output_length(input_length)] int32 in [0, output_size)
    mask: np.ndarray  # [batch, output_length] bool: the places the reference's accuracy counts


@runtime_checkable
class Task(Protocol):
    name: str
    level: str
    input_size: int
    output_size: int

    def output_length(self, input_length: int) -> int: ...

    def sample(self, rng: np.random.Generator, batch: int, length: int) -> Sample: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class AlgorithmicTask:
    """Base of the registered tasks: checks a request, then draws inputs and solves them.

    A subclass sets `name` and `level` defaults, `input_size`, `output_size`, `output_rule`
    (the output length in words, for listings) and implements `solve` (the reference's
    outputs and mask for given tapes) and, unless its inputs are uniform symbols, `_draw`
    (random input tapes), or overrides `sample` because its generator knows the answer anyway.
    """

    name: str
    level: str
    output_rule = "1"
    input_rule = "L"

    @property
    def input_size(self) -> int:
        raise NotImplementedError

    @property
    def output_size(self) -> int:
        raise NotImplementedError

    def input_length(self, length: int) -> int:
        """Columns of the input tape for a requested `length` (the same, except where a
        task's reference changes it: modular_arithmetic)."""
        return length

    def output_length(self, input_length: int) -> int:
        return 1

    def sample(self, rng: np.random.Generator, batch: int, length: int) -> Sample:
        check_request(rng, batch, length)
        inputs = np.asarray(self._draw(rng, batch, length), np.int32)
        outputs, mask = self.solve(inputs)
        return Sample(inputs, outputs, mask)

    def _draw(self, rng: np.random.Generator, batch: int, length: int) -> np.ndarray:
        """Input tapes of symbols drawn uniformly (most tasks; the others override it)."""
        return rng.integers(0, self.input_size, (batch, length))

    def solve(self, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(outputs, mask) the reference gives for input tapes `inputs` [batch, length]."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True, kw_only=True)
class StringTask(AlgorithmicTask):
    """A string of uniform symbols of a `vocab_size` alphabet answered in the same alphabet,
    by default one output place per input place (reverse_string, odds_first, bucket_sort;
    duplicate_string doubles it)."""

    vocab_size: int = 2
    output_rule = "L"
    input_size = property(lambda self: self.vocab_size)
    output_size = property(lambda self: self.vocab_size)

    def output_length(self, input_length):
        return input_length


def check_request(rng, batch: int, length: int) -> None:
    check(isinstance(rng, np.random.Generator), "rng", type(rng).__name__,
          "a numpy np.random.Generator (np.random.default_rng(seed))")
    for field, value in (("batch", batch), ("length", length)):
        check(isinstance(value, (int, np.integer)) and not isinstance(value, bool)
              and value >= 1, field, value, "an int >= 1")


def full_mask(outputs: np.ndarray) -> np.ndarray:
    return np.ones(outputs.shape, bool)


def termination_mask(outputs: np.ndarray) -> np.ndarray:
    """The reference's `accuracy_mask` for outputs padded after a termination token: True up
    to and including the first place holding the row's largest class id (the termination
    token, the only place with that id)."""
    end = np.argmax(outputs, axis=1)[:, None]
    return np.arange(outputs.shape[1])[None, :] <= end


def single(values) -> tuple[np.ndarray, np.ndarray]:
    """(outputs [batch, 1], mask) for a task with one answer per row."""
    outputs = np.asarray(values, np.int32).reshape(-1, 1)
    return outputs, full_mask(outputs)


def masked_accuracy(predicted: np.ndarray, sample: Sample) -> float:
    """The reference's accuracy of predicted class ids [batch, output_length] on a sample:
    correct places where the mask is True over the number of such places in the batch."""
    mask = sample.mask
    return float(np.sum((predicted == sample.outputs) & mask) / np.sum(mask))


def empty_target_tape(task: Task, inputs: np.ndarray) -> np.ndarray:
    """The reference's model input [batch, L + output_length(L)]: the input tape, then one
    empty token (id `task.input_size`, so the model's vocabulary is input_size + 1) per output
    place. The model's last output_length(L) outputs are its predictions."""
    batch, length = inputs.shape
    empty = np.full((batch, task.output_length(length)), task.input_size, np.int32)
    return np.concatenate([np.asarray(inputs, np.int32), empty], axis=1)


_REGISTRY: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add a task instance under its `name` (a variant is another instance with its own name)."""
    if task.name in _REGISTRY:
        raise ConfigError("data.task", task.name, "a name not registered yet")
    check(task.level in LEVELS, f"{task.name}.level", task.level, f"one of {', '.join(LEVELS)}")
    _REGISTRY[task.name] = task
    return task


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str) -> Task:
    if name not in _REGISTRY:
        raise ConfigError("data.task", name, f"one of {', '.join(names())}")
    return _REGISTRY[name]
