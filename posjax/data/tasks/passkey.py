"""passkey: a k-digit key stated once at `depth` in filler text; the cue at the end of the
row asks for it, its k digits masked (Mohtashami & Jaggi 2023; YaRN's and TAPE's passkey).

    [CLS] filler "the pass key is 4 0 7 1 9 ." filler "the pass key is [MASK] x5" [SEP]
"""

from __future__ import annotations

import numpy as np

from posjax.data.tasks import common

NAME = "passkey"


def needed(vocab: common.Vocab, digits: int) -> int:
    """Body tokens the statement and the cue take."""
    return 2 * len(vocab.prefix) + 2 * digits + len(vocab.end)


def make(vocab: common.Vocab, stream: np.ndarray, length: int, depth: float,
         rng: np.random.Generator, digits: int = common.DIGITS) -> tuple[dict, dict]:
    """One row of `length` tokens -> (batch-contract arrays, info). info: `answer` (row
    columns of the masked digits), `planted` (row column of the stated key's first digit),
    `key` (its ids), `distance` (answer column - planted column)."""
    depth = common.check_depth(depth)
    common.check_length(NAME, length, needed(vocab, digits))
    value = common.key(rng, vocab, digits)
    prefix = np.array(vocab.prefix, np.int32)
    statement = np.concatenate([prefix, value, np.array(vocab.end, np.int32)])
    cue = np.concatenate([prefix, value])
    room = length - 2 - cue.size
    at = common.start_at(depth, room, statement.size)
    text, _ = common.assemble(stream, rng, room, [(at, statement)])
    body = np.concatenate([text, cue])
    answer = np.arange(body.size - digits, body.size)
    planted = 1 + at + prefix.size
    return common.frame(vocab, body, answer), {
        "answer": answer + 1, "planted": planted, "key": value, "distance": int(answer[0] + 1 - planted)}
