"""copy_span (induction): a span of 2k random word tokens appears once at `depth`; the cue at
the end repeats its first k tokens and masks the last k. Predicting them needs attention to
that exact earlier context, `distance` tokens back; random words cannot be guessed from
language (chance 1/|pool| per token).

    [CLS] filler  w1 .. wk wk+1 .. w2k  filler  w1 .. wk [MASK] x k  [SEP]
"""

from __future__ import annotations

import numpy as np

from posjax.data.tasks import common

NAME = "copy_span"


def needed(vocab: common.Vocab, digits: int) -> int:
    return 4 * digits


def make(vocab: common.Vocab, stream: np.ndarray, length: int, depth: float,
         rng: np.random.Generator, digits: int = common.DIGITS) -> tuple[dict, dict]:
    """One row -> (arrays, info) as passkey.make: `key` is the masked half of the span,
    `planted` the row column of its first occurrence."""
    depth = common.check_depth(depth)
    common.check_length(NAME, length, needed(vocab, digits))
    span = rng.choice(vocab.pool, size=2 * digits, replace=False).astype(np.int32)
    cue = span.copy()
    room = length - 2 - cue.size
    at = common.start_at(depth, room, span.size)
    text, _ = common.assemble(stream, rng, room, [(at, span)])
    body = np.concatenate([text, cue])
    answer = np.arange(body.size - digits, body.size)
    planted = 1 + at + digits
    return common.frame(vocab, body, answer), {
        "answer": answer + 1, "planted": planted, "key": span[digits:],
        "distance": int(answer[0] + 1 - planted)}
