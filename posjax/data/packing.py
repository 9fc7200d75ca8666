"""Tokenized corpora as flat arrays, packing into fixed-length rows, and row assembly.

A corpus is tokenized once into three flat arrays (tokens, word starts, document offsets) so
that packing and row assembly are slicing, not Python lists of lists. Packing is static (done
once); the grain pipeline shuffles ROWS per epoch and masks them dynamically.

Row layout: each packed example is [CLS] tokens [SEP]; positions restart at 0 for each example;
segment_ids number the examples of a row 1, 2, ... and are 0 on padding (pad id 0).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from posjax.data import masking, pose


@dataclasses.dataclass(frozen=True)
class Tokenized:
    """A tokenized document collection: document d is tokens[offsets[d]:offsets[d+1]]."""

    tokens: np.ndarray  # int32 [N]
    word_starts: np.ndarray  # bool [N]
    offsets: np.ndarray  # int64 [D+1]

    @property
    def num_documents(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.size)

    @classmethod
    def from_encoded(cls, encoded) -> "Tokenized":
        lengths = [len(ids) for ids, _ in encoded]
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if encoded:
            tokens = np.concatenate([ids for ids, _ in encoded]).astype(np.int32)
            starts = np.concatenate([s for _, s in encoded]).astype(bool)
        else:
            tokens, starts = np.zeros(0, np.int32), np.zeros(0, bool)
        return cls(tokens, starts, offsets)


@dataclasses.dataclass(frozen=True)
class Packing:
    """Rows made of examples; example e is tokens[start[e]:start[e]+length[e]]."""

    start: np.ndarray  # int64 [E]
    length: np.ndarray  # int64 [E]
    row_offsets: np.ndarray  # int64 [R+1]: row r holds examples row_offsets[r]:row_offsets[r+1]
    seq_len: int

    @property
    def num_rows(self) -> int:
        return len(self.row_offsets) - 1


def pack(corpus: Tokenized, seq_len: int, sop: bool = False) -> Packing:
    """Split documents into chunks of at most seq_len-2 tokens and pack chunks into rows.

    Long documents become consecutive chunks (each its own example with [CLS]/[SEP]); short
    examples share a row greedily in corpus order (next-fit). Empty documents are dropped.
    With `sop` (ALBERT sentence order) chunks are seq_len-3 tokens ([CLS] A [SEP] B [SEP]),
    one per row, and chunks of fewer than 2 tokens (nothing to split) are dropped.
    """
    body = seq_len - (3 if sop else 2)
    if body < (2 if sop else 1):
        raise ValueError(f"seq_len must be >= {5 if sop else 3}, got {seq_len}")
    doc_len = np.diff(corpus.offsets)
    num_chunks = -(-doc_len // body)  # ceil; 0 for empty documents
    doc_of_chunk = np.repeat(np.arange(len(doc_len)), num_chunks)
    first_chunk = np.cumsum(num_chunks) - num_chunks
    k = np.arange(doc_of_chunk.size) - first_chunk[doc_of_chunk]  # chunk number within its doc
    start = corpus.offsets[doc_of_chunk] + k * body
    length = np.minimum(body, doc_len[doc_of_chunk] - k * body)
    if sop:
        keep = length >= 2
        start, length = start[keep], length[keep]
        return Packing(start.astype(np.int64), length.astype(np.int64),
                       np.arange(length.size + 1, dtype=np.int64), seq_len)
    # Next-fit packing: a plain loop, linear in the number of examples (~20k for a corpus
    # of 2M tokens at length 128), well under a second.
    row_starts = []
    used = seq_len
    for e, n in enumerate((length + 2).tolist()):
        if used + n > seq_len:
            row_starts.append(e)
            used = 0
        used += n
    row_offsets = np.array(row_starts + [length.size], np.int64)
    return Packing(start.astype(np.int64), length.astype(np.int64), row_offsets, seq_len)


def randomized_positions(rng: np.random.Generator, n: int, max_length: int) -> np.ndarray:
    """A sorted random subset of [0, max_length) of size n (Ruoss et al., 2023).

    numpy twin of a JAX helper, so the input pipeline never calls JAX.
    """
    return np.sort(rng.choice(max_length, size=n, replace=False)).astype(np.int32)


def assemble(corpus: Tokenized, packing: Packing, row: int, *, cls_id: int, sep_id: int,
             pad_id: int = 0):
    """Unmasked arrays of one row: ids, word_starts, maskable, positions, segment_ids."""
    L = packing.seq_len
    ids = np.full(L, pad_id, np.int32)
    starts = np.ones(L, bool)
    maskable = np.zeros(L, bool)
    positions = np.zeros(L, np.int32)
    segments = np.zeros(L, np.int32)
    at = 0
    lo, hi = packing.row_offsets[row], packing.row_offsets[row + 1]
    for seg, e in enumerate(range(lo, hi), start=1):
        s, n = int(packing.start[e]), int(packing.length[e])
        ids[at] = cls_id
        ids[at + 1:at + 1 + n] = corpus.tokens[s:s + n]
        ids[at + 1 + n] = sep_id
        starts[at + 1:at + 1 + n] = corpus.word_starts[s:s + n]
        # A chunk cut in the middle of a word starts a "word" of its own: fine for masking.
        starts[at + 1] = True
        maskable[at + 1:at + 1 + n] = True
        positions[at:at + n + 2] = np.arange(n + 2)
        segments[at:at + n + 2] = seg
        at += n + 2
    return ids, starts, maskable, positions, segments


def assemble_sop(corpus: Tokenized, packing: Packing, row: int, rng: np.random.Generator, *,
                 cls_id: int, sep_id: int, pad_id: int = 0):
    """ALBERT sentence order: [CLS] A [SEP] B [SEP] from one chunk cut at a random word start.

    Label 0 keeps the text order, 1 swaps A and B (probability 1/2). One example per row:
    segment_ids 1 on real tokens, token_type_ids 0 up to the first [SEP], 1 after it.
    Returns (ids, word_starts, maskable, positions, segment_ids, token_type_ids, label).
    """
    L = packing.seq_len
    s, n = int(packing.start[row]), int(packing.length[row])
    toks, wst = corpus.tokens[s:s + n], corpus.word_starts[s:s + n].copy()
    wst[0] = True
    cuts = np.flatnonzero(wst[1:]) + 1  # word starts after the first token
    cut = int(rng.choice(cuts)) if cuts.size else int(rng.integers(1, n))
    a, b, sa, sb = toks[:cut], toks[cut:], wst[:cut], wst[cut:].copy()
    sb[0] = True
    label = int(rng.random() < 0.5)
    if label:
        a, b, sa, sb = b, a, sb, sa
    ids = np.full(L, pad_id, np.int32)
    starts = np.ones(L, bool)
    maskable = np.zeros(L, bool)
    types = np.zeros(L, np.int32)
    na, nb = a.size, b.size
    ids[0], ids[1:1 + na], ids[1 + na] = cls_id, a, sep_id
    ids[2 + na:2 + na + nb], ids[2 + na + nb] = b, sep_id
    starts[1:1 + na], starts[2 + na:2 + na + nb] = sa, sb
    maskable[1:1 + na] = maskable[2 + na:2 + na + nb] = True
    types[2 + na:3 + na + nb] = 1
    total = na + nb + 3
    positions = np.zeros(L, np.int32)
    positions[:total] = np.arange(total)
    segments = np.zeros(L, np.int32)
    segments[:total] = 1
    return ids, starts, maskable, positions, segments, types, label


@dataclasses.dataclass(frozen=True)
class RowMaker:
    """Turns (row, epoch) into one example dict of the batch contract (no batch axis)."""

    corpus: Tokenized
    packing: Packing
    seed: int
    rate: float
    whole_word: bool
    cls_id: int
    sep_id: int
    mask_id: int
    vocab_size: int
    num_special: int
    randomized_max_length: int | None = None
    sop: bool = False  # rows from pack(..., sop=True); adds "sop_labels"
    pose_target_length: int = 0  # PoSE (posjax.data.pose); 0 = off
    pose_chunks: int = 2

    def __call__(self, row: int, epoch: int) -> dict[str, np.ndarray]:
        rng = masking.row_rng(self.seed, epoch, row)
        extra = {}
        if self.sop:
            ids, starts, maskable, positions, segments, types, label = assemble_sop(
                self.corpus, self.packing, row, rng, cls_id=self.cls_id, sep_id=self.sep_id)
            extra["sop_labels"] = np.int32(label)
        else:
            ids, starts, maskable, positions, segments = assemble(
                self.corpus, self.packing, row, cls_id=self.cls_id, sep_id=self.sep_id)
            types = np.zeros_like(ids)
        inputs, targets, weights = masking.mask_row(
            ids, starts, maskable, rng, rate=self.rate, whole_word=self.whole_word,
            mask_id=self.mask_id, vocab_size=self.vocab_size, num_special=self.num_special)
        if self.randomized_max_length:
            for seg in range(1, int(segments.max()) + 1):
                where = np.flatnonzero(segments == seg)
                positions[where] = randomized_positions(rng, where.size, self.randomized_max_length)
        elif self.pose_target_length:  # each example of the row its own chunks and skips
            for seg in range(1, int(segments.max()) + 1):
                where = np.flatnonzero(segments == seg)
                positions[where] = pose.pose_positions(rng, where.size, self.pose_target_length,
                                                       self.pose_chunks)
        return {
            "input_ids": inputs,
            "token_type_ids": types,
            "positions": positions,
            "segment_ids": segments,
            "mlm_targets": targets,
            "mlm_weights": weights,
            **extra,
        }
