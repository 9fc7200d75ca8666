"""Synthetic retrieval tasks generated from the embedded corpora (seeded, offline).

    rows = generate("passkey", tokenizer, stream, length=512, rows_per_depth=20, seed=0)
    rows.arrays          # batch contract [R, L]; the answer tokens are the only masked targets
    rows.depth, rows.answer, rows.planted, rows.distance   # [R], [R, k], [R], [R]

Tasks (one module each): passkey, needle (multi-key), copy_span (induction). Row r at depth
d uses the Generator seeded with (seed, task, d, r) and nothing else, so a row holds the same
key, names and filler start at every length: lengths differ only in how much filler lies
between the statement and the cue. The evaluator's `longdoc` task (MLM inside single long
documents) needs no generator: posjax.evaluation.run.tasks builds it from the held-out stream.

Training mixes tasks into pretraining with config.data.tasks = {'passkey': 0.2, ...}: the
fraction of rows replaced by task rows (posjax.data.pipeline; `check_fractions`).
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np

from posjax.data.tasks import common, copy_span, needle, passkey
from posjax.data.tasks.common import DEPTHS, DIGITS, Vocab, filler_stream, task_vocab
from posjax.errors import ConfigError

GENERATORS = {m.NAME: m for m in (passkey, needle, copy_span)}
TASKS = tuple(GENERATORS) + ("longdoc",)  # what eval.py --tasks takes


@dataclasses.dataclass
class TaskRows:
    arrays: dict[str, np.ndarray]  # batch contract [R, L]
    depth: np.ndarray  # [R] float
    answer: np.ndarray  # [R, k] row columns of the masked answer tokens
    planted: np.ndarray  # [R] row column where the planted answer starts
    distance: np.ndarray  # [R] answer column - planted column
    keys: np.ndarray  # [R, k] the answer ids


def check_task(name, allowed=TASKS, field: str = "tasks") -> str:
    if name not in allowed:
        raise ConfigError(field, name, f"one of {', '.join(allowed)}")
    return name


def check_fractions(tasks) -> dict[str, float]:
    """config.data.tasks -> {name: fraction}: known generator names, fractions in (0, 1],
    summing to at most 1 (the rest of the rows stay MLM text)."""
    if tasks is None:
        return {}
    try:
        items = dict(tasks).items()
    except (TypeError, ValueError):
        raise ConfigError("data.tasks", tasks, "a dict {task: fraction of rows}, e.g. "
                          "{'passkey': 0.2}") from None
    out = {}
    for name, frac in items:
        check_task(name, tuple(GENERATORS), "data.tasks")
        if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 < frac <= 1:
            raise ConfigError(f"data.tasks.{name}", frac, "a fraction of rows in (0, 1]")
        out[name] = float(frac)
    if sum(out.values()) > 1 + 1e-9:
        raise ConfigError("data.tasks", dict(out), f"fractions summing to at most 1 (they sum "
                          f"to {sum(out.values()):g})")
    return out


def needed(name: str, vocab: Vocab, digits: int = DIGITS) -> int:
    """Body tokens (length - 2) the task needs at the least."""
    return GENERATORS[check_task(name, tuple(GENERATORS))].needed(vocab, digits)


def row_rng(seed: int, name: str, depth: float, row: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(
        [int(seed) & 0xFFFFFFFF, 20, zlib.crc32(name.encode()), int(round(depth * 1e6)), int(row)]))


def generate(name: str, tokenizer, stream: np.ndarray, length: int, *, depths=DEPTHS,
             rows_per_depth: int = 20, seed: int = 0, digits: int = DIGITS) -> TaskRows:
    """rows_per_depth rows at every depth (depth-major). `stream`: filler tokens
    (filler_stream of a tokenized split)."""
    module = GENERATORS[check_task(name, tuple(GENERATORS))]
    depths = [common.check_depth(d) for d in depths]
    if isinstance(rows_per_depth, bool) or not isinstance(rows_per_depth, int) or rows_per_depth < 1:
        raise ConfigError("rows_per_depth", rows_per_depth, "a positive int")
    vocab = task_vocab(tokenizer)
    made = [(d, *module.make(vocab, stream, length, d, row_rng(seed, name, d, r), digits))
            for d in depths for r in range(rows_per_depth)]
    return TaskRows(
        arrays={k: np.stack([m[1][k] for m in made]) for k in made[0][1]},
        depth=np.array([m[0] for m in made], np.float64),
        answer=np.stack([m[2]["answer"] for m in made]).astype(np.int64),
        planted=np.array([m[2]["planted"] for m in made], np.int64),
        distance=np.array([m[2]["distance"] for m in made], np.int64),
        keys=np.stack([m[2]["key"] for m in made]).astype(np.int32))


__all__ = ["DEPTHS", "DIGITS", "GENERATORS", "TASKS", "TaskRows", "Vocab", "check_fractions",
           "check_task", "filler_stream", "generate", "needed", "row_rng", "task_vocab"]
