"""data.corpus='algorithmic': training batches of one task under the reference's curriculum,
seeded and resumable, and fixed evaluation batches at the training lengths.

The curriculum (google-deepmind/randomized_positional_encodings, experiments/example.py with
curriculum.py `UniformCurriculum(range(1, 41))`): every batch draws ONE input length n
uniformly in 1..data.max_input_length, and all its rows have that length. Batch k of a run
depends only on (seed, k): numpy's Generator seeded with (seed, stream, k) draws the length,
the task's rows and (with data.randomized_max_length) the batch's positions, so the
iterator's state is the batch count and a resumed run replays the same batches.

Shapes: the tape (posjax.data.tape) is padded to the next multiple of data.bucket_multiple,
at most data.seq_len, so training compiles one program per bucket instead of one per length
(padding is masked: segment_ids 0, weights 0, and the real places compute exactly what the
unpadded tape does).

No JAX here: batches are numpy, made on the host while the device runs the previous step.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from posjax import schema
from posjax.data import algorithmic, tape
from posjax.data.masking import EVAL_SEED
from posjax.errors import ConfigError, check

TRAIN_STREAM, EVAL_STREAM = 0, 1


def task_of(config: Any):
    """The task named by config.data.task (ConfigError naming the field when unknown)."""
    name = schema.view(config).data.task
    if not name:
        raise ConfigError("data.task", name, "an algorithmic task name with "
                          "data.corpus='algorithmic'")
    return algorithmic.get(name)


def longest_tape(task, max_input_length: int) -> int:
    """The most places a training tape has: max over n <= N of n + output_length(n)."""
    return max(n + task.output_length(n) for n in range(1, int(max_input_length) + 1))


def check_config(config: Any) -> None:
    """The algorithmic data fields against the task and the model (ConfigError)."""
    data = schema.view(config).data
    task = task_of(config)
    for name in ("max_input_length", "bucket_multiple", "task_loss"):
        schema.checked(config, f"data.{name}")
    tok = data.tokenizer
    check(tok == "task_symbols", "data.tokenizer", tok,
          "'task_symbols' with data.corpus='algorithmic'")
    need = longest_tape(task, data.max_input_length)
    check(data.seq_len >= need, "data.seq_len", data.seq_len,
          f"an int >= {need}, the longest tape of data.task='{data.task}' at "
          f"data.max_input_length={data.max_input_length}")
    classes = schema.view(config).model.output_classes
    check(classes == task.output_size, "model.output_classes", classes,
          f"{task.output_size}, the output size of data.task='{data.task}'")


def _rng(seed: int, stream: int, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, stream, index]))


def make_batch(task, rng: np.random.Generator, batch: int, input_length: int, *,
               bucket_multiple: int, seq_len: Optional[int],
               randomized_max_length: Optional[int], loss_on: str = "outputs",
               randomized_layers: int = 0) -> dict:
    """One batch of `batch` rows of `input_length` input symbols, padded to its bucket
    (seq_len None: no cap, for lengths beyond training). The evaluator's entry point too.
    randomized_layers > 0 (with randomized_max_length): a draw per attention layer too,
    batch['layer_positions'] (data.randomized_layers)."""
    sample = task.sample(rng, batch, int(input_length))
    places = int(np.shape(sample.inputs)[1]) + int(np.shape(sample.outputs)[1])
    positions = tape.tape_positions(rng, places, randomized_max_length)
    length = tape.bucket_length(places, bucket_multiple, seq_len)
    out = tape.tape_batch(sample, task.input_size, length=length, positions=positions,
                          loss_on=loss_on)
    if randomized_layers and randomized_max_length is not None:
        out["layer_positions"] = tape.layer_positions(rng, batch, places, length,
                                                      randomized_layers, randomized_max_length)
    return out


def randomized_layers(config: Any) -> int:
    """The layers that draw their own positions (data.randomized_layers): model.num_layers,
    or 0."""
    view = schema.view(config)
    return int(view.model.num_layers) if view.data.randomized_layers else 0


class CurriculumIterator:
    """Infinite training batches (this process's rows lo..hi-1 of each global batch), with
    get_state / set_state like the grain iterators of posjax.data.pipeline."""

    def __init__(self, config: Any, task, seed: int, rows: Optional[tuple[int, int]] = None):
        data = schema.view(config).data
        self.task = task
        self.seed = int(seed)
        self.batch = int(data.batch_size)
        self.max_input_length = int(data.max_input_length)
        self.bucket_multiple = int(data.bucket_multiple)
        self.seq_len = int(data.seq_len)
        self.randomized_max_length = data.randomized_max_length
        self.randomized_layers = randomized_layers(config)
        self.loss_on = data.task_loss
        lo, hi = (0, self.batch) if rows is None else (int(rows[0]), int(rows[1]))
        if not 0 <= lo < hi <= self.batch:
            raise ConfigError("rows", rows, f"(lo, hi) with 0 <= lo < hi <= data.batch_size="
                              f"{self.batch}")
        self.rows = (lo, hi)
        self.batches = 0

    def __iter__(self):
        return self

    def input_length(self, index: int) -> int:
        """Batch `index`'s input length (uniform in 1..max_input_length)."""
        return int(_rng(self.seed, TRAIN_STREAM, index).integers(1, self.max_input_length + 1))

    def __next__(self) -> dict:
        rng = _rng(self.seed, TRAIN_STREAM, self.batches)
        n = int(rng.integers(1, self.max_input_length + 1))
        out = make_batch(self.task, rng, self.batch, n, bucket_multiple=self.bucket_multiple,
                         seq_len=self.seq_len, randomized_max_length=self.randomized_max_length,
                         loss_on=self.loss_on, randomized_layers=self.randomized_layers)
        self.batches += 1
        lo, hi = self.rows
        if (lo, hi) != (0, self.batch):
            out = {k: v[lo:hi] for k, v in out.items()}
        return out

    def get_state(self) -> dict:
        return {"algorithmic_batches": int(self.batches)}

    def set_state(self, state: dict) -> None:
        if not (isinstance(state, dict) and "algorithmic_batches" in state):
            raise ConfigError("checkpoint data position", state,
                              "the state of an algorithmic run ({'algorithmic_batches': k}); "
                              "this checkpoint was written by another data source")
        self.batches = int(state["algorithmic_batches"])


def make_train_iterator(config: Any, seed: int, rows: Optional[tuple[int, int]] = None):
    return CurriculumIterator(config, task_of(config), seed, rows)


def make_eval_batches(config: Any, num_batches: int) -> list[dict]:
    """`num_batches` fixed batches at training lengths (the curriculum's distribution, seeded
    by EVAL_SEED, never by the training seed), for the loop's held-out accuracy. Randomized
    positions only with data.randomized_eval (the reference randomizes at test time too)."""
    data = schema.view(config).data
    task = task_of(config)
    rml = data.randomized_max_length if data.randomized_eval else None
    out = []
    for b in range(int(num_batches)):
        rng = _rng(EVAL_SEED, EVAL_STREAM, b)
        n = int(rng.integers(1, int(data.max_input_length) + 1))
        out.append(make_batch(task, rng, int(data.batch_size), n,
                              bucket_multiple=int(data.bucket_multiple), seq_len=int(data.seq_len),
                              randomized_max_length=rml, loss_on=data.task_loss,
                              randomized_layers=randomized_layers(config)))
    return out
