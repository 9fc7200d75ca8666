"""What every retrieval task shares: the tokens it plants, the filler, and the row frame.

A task row is one example of exactly `length` tokens in the batch contract:

    [CLS] filler ... STATEMENT ... filler CUE [SEP]

The statement (e.g. "the pass key is 4 0 7 1 9 .") starts at `depth` of the room the filler
leaves for it: column 1 + round(depth * (R - S)), R = length - 2 - len(CUE), S = len(STATEMENT),
so depth 0 puts it right after [CLS] and depth 1 right before the cue. The cue repeats the
question and ends with the answer tokens, each replaced by [MASK] (always: it is a question,
not BERT's 80/10/10 corruption); they are the only scored places (mlm_weights 1).

Keys are written with a 10-token "digit" alphabet (`Vocab.digits`): the tokenizer's ASCII
digits when it has them all, else full-width digits (People's Daily), else the letters a..j
(a KJV WordPiece vocabulary has no digits), else ten fixed ids. The filler never holds an
alphabet token, so a planted key is the only run of key digits in a row's input.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from posjax import schema
from posjax.errors import ConfigError

DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
DIGITS = schema.field("data.task_digits").default  # key length k (the YaRN / TAPE passkey: 5)

_ALPHABETS = ("0123456789", "０１２３４５６７８９", "abcdefghij")
# (statement / cue prefix, the name-question form "{}" = the name, end of statement)
_PHRASES = {
    "wordpiece": ("the pass key is", "the pass key of {} is", "."),
    "chinese_chars": ("口令是", "{}的口令是", "。"),
}


@dataclasses.dataclass(frozen=True)
class Vocab:
    """The ids a task needs from one tokenizer."""

    cls_id: int
    sep_id: int
    mask_id: int
    digits: np.ndarray  # [10] the key alphabet
    prefix: tuple[int, ...]  # "the pass key is"
    named: tuple[tuple[int, ...], tuple[int, ...]]  # ("the pass key of", "is") around a name
    end: tuple[int, ...]  # "."
    pool: np.ndarray  # ids for names and random spans: whole words, not specials / digits


def _alphabet(tokenizer) -> np.ndarray:
    for chars in _ALPHABETS:
        if all(c in tokenizer.token_to_id for c in chars):
            return np.array([tokenizer.token_to_id[c] for c in chars], np.int32)
    first = tokenizer.num_special
    if tokenizer.vocab_size < first + 20:
        raise ConfigError("data.vocab_size", tokenizer.vocab_size,
                          f"at least {first + 20} tokens (tasks need 10 key digits and filler)")
    return np.arange(first, first + 10, dtype=np.int32)


@functools.lru_cache(maxsize=8)
def _vocab(tokenizer) -> Vocab:
    digits = _alphabet(tokenizer)
    prefix, named, end = _PHRASES.get(tokenizer.name, _PHRASES["wordpiece"])
    before, after = named.split("{}")
    enc = lambda s: tuple(int(i) for i in tokenizer.encode(s))  # noqa: E731
    special = set(range(tokenizer.num_special)) | set(digits.tolist())
    pool = [i for i, t in enumerate(tokenizer.vocab)
            if i not in special and not t.startswith("##") and t.isalpha()]
    if len(pool) < 20:
        raise ConfigError("data.vocab_size", tokenizer.vocab_size,
                          "a vocabulary with at least 20 word tokens (names and spans of tasks)")
    return Vocab(tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id, digits, enc(prefix),
                 (enc(before), enc(after)), enc(end), np.array(pool, np.int32))


def task_vocab(tokenizer) -> Vocab:
    """The Vocab of `tokenizer` (cached per tokenizer object)."""
    return _vocab(tokenizer)


def filler_stream(tokens: np.ndarray, vocab: Vocab, num_special: int) -> np.ndarray:
    """Corpus tokens usable as filler: specials and key-alphabet tokens removed."""
    tokens = np.asarray(tokens, np.int32)
    keep = (tokens >= num_special) & ~np.isin(tokens, vocab.digits)
    out = tokens[keep]
    if out.size == 0:
        raise ConfigError("data.corpus", None, "a corpus with text for task filler")
    return out


def check_depth(depth) -> float:
    if isinstance(depth, bool) or not isinstance(depth, (int, float)) or not 0 <= depth <= 1:
        raise ConfigError("depth", depth, "a number in [0, 1] (0 = after [CLS], 1 = before the cue)")
    return float(depth)


def check_length(task: str, length, needed: int) -> int:
    """`needed`: the body tokens the task's statements and cue take."""
    if isinstance(length, bool) or not isinstance(length, int) or length < needed + 2:
        raise ConfigError("length", length, f"an int >= {needed + 2} for task {task} (its "
                          f"statement(s) and cue take {needed} tokens, plus [CLS] and [SEP])")
    return length


def key(rng: np.random.Generator, vocab: Vocab, k: int) -> np.ndarray:
    return vocab.digits[rng.integers(0, 10, size=k)]


def start_at(depth: float, room: int, size: int) -> int:
    """Offset of a statement of `size` tokens at `depth` of a region of `room` tokens."""
    return int(round(depth * (room - size)))


def filler(stream: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` consecutive filler tokens from a seeded offset (wrapping around the stream)."""
    at = int(rng.integers(0, stream.size))
    return np.take(stream, np.arange(at, at + n) % stream.size)


def assemble(stream: np.ndarray, rng: np.random.Generator, room: int,
             pieces: list[tuple[int, np.ndarray]]) -> tuple[np.ndarray, list[int]]:
    """`room` tokens: filler with each (offset, tokens) piece placed at its offset (pieces
    sorted, not overlapping); returns the tokens and each piece's offset."""
    size = sum(p.size for _, p in pieces)
    text = filler(stream, room - size, rng)
    out, at, used = [], 0, 0
    for offset, piece in sorted(pieces, key=lambda p: p[0]):
        gap = offset - at
        out += [text[used:used + gap], piece]
        used += gap
        at = offset + piece.size
    out.append(text[used:])
    return np.concatenate(out).astype(np.int32), [o for o, _ in pieces]


def frame(vocab: Vocab, body: np.ndarray, answer: np.ndarray) -> dict[str, np.ndarray]:
    """[CLS] body [SEP] in the batch contract; `answer` = body columns to mask and score."""
    ids = np.concatenate([[vocab.cls_id], body, [vocab.sep_id]]).astype(np.int32)
    n = ids.size
    cols = np.asarray(answer, np.int64) + 1
    targets = np.zeros(n, np.int32)
    targets[cols] = ids[cols]
    weights = np.zeros(n, np.float32)
    weights[cols] = 1.0
    inputs = ids.copy()
    inputs[cols] = vocab.mask_id
    return {"input_ids": inputs, "token_type_ids": np.zeros(n, np.int32),
            "positions": np.arange(n, dtype=np.int32), "segment_ids": np.ones(n, np.int32),
            "mlm_targets": targets, "mlm_weights": weights}
