"""needle (multi-key): `keys` keys with distinct names, each stated once; the cue names one
of them (the one at `depth`) and masks its value, the others are distractors (RULER's
multi-key needle, for an encoder).

    [CLS] ... "the pass key of moses is 3 8 1 0 2 ." ... "the pass key of aaron is 7 7 0 4 1 ."
          ... "the pass key of aaron is [MASK] x5" [SEP]

The queried statement starts at `depth` of the room (common.start_at); the distractors lie at
random offsets in the room left on either side of it, never overlapping.
"""

from __future__ import annotations

import numpy as np

from posjax.data.tasks import common

NAME = "needle"
KEYS = 4  # statements per row: 1 queried + 3 distractors


def _statement_size(vocab: common.Vocab, digits: int) -> int:
    return len(vocab.named[0]) + 1 + len(vocab.named[1]) + digits + len(vocab.end)


def needed(vocab: common.Vocab, digits: int, keys: int = KEYS) -> int:
    """Body tokens: room for every statement wherever the queried one lies, plus the cue."""
    s = _statement_size(vocab, digits)
    return (keys + 1) * s + (s - len(vocab.end))


def _spread(rng: np.random.Generator, count: int, lo: int, hi: int, size: int) -> list[int]:
    """`count` random non-overlapping offsets of pieces of `size` inside [lo, hi)."""
    slack = hi - lo - count * size
    gaps = np.sort(rng.integers(0, slack + 1, size=count))
    return [lo + int(g) + i * size for i, g in enumerate(gaps)]


def make(vocab: common.Vocab, stream: np.ndarray, length: int, depth: float,
         rng: np.random.Generator, digits: int = common.DIGITS,
         keys: int = KEYS) -> tuple[dict, dict]:
    """One row -> (arrays, info) as passkey.make; info also has `distractors` (row columns
    of the other keys' first digits)."""
    depth = common.check_depth(depth)
    common.check_length(NAME, length, needed(vocab, digits, keys))
    names = rng.choice(vocab.pool, size=keys, replace=False)
    values: list[np.ndarray] = []
    while len(values) < keys:  # distinct keys, so the name alone decides the answer
        v = common.key(rng, vocab, digits)
        if not any(np.array_equal(v, w) for w in values):
            values.append(v)
    before, after = np.array(vocab.named[0], np.int32), np.array(vocab.named[1], np.int32)
    end = np.array(vocab.end, np.int32)
    statements = [np.concatenate([before, [n], after, v, end]) for n, v in zip(names, values)]
    size = statements[0].size
    cue = np.concatenate([before, [names[0]], after, values[0]])
    room = length - 2 - cue.size
    at = common.start_at(depth, room, size)
    left, right = at // size, (room - at - size) // size  # whole statements each side fits
    others = keys - 1
    n_left = int(rng.integers(max(0, others - right), min(others, left) + 1))
    offsets = [at] + _spread(rng, n_left, 0, at, size) + _spread(
        rng, others - n_left, at + size, room, size)
    text, _ = common.assemble(stream, rng, room, list(zip(offsets, statements)))
    body = np.concatenate([text, cue])
    answer = np.arange(body.size - digits, body.size)
    lead = before.size + 1 + after.size  # tokens before a statement's first digit
    planted = 1 + at + lead
    return common.frame(vocab, body, answer), {
        "answer": answer + 1, "planted": planted, "key": values[0],
        "distractors": [1 + o + lead for o in offsets[1:]],
        "distance": int(answer[0] + 1 - planted)}
