"""posjax.data.packing: chunking, next-fit packing, row layout ([CLS] .. [SEP], positions, segments)."""

from __future__ import annotations

import numpy as np
import pytest

from posjax.data import packing

CLS, SEP = 2, 3


def _corpus(lengths, seed=0):
    rng = np.random.default_rng(seed)
    encoded = [(rng.integers(5, 100, n).astype(np.int32), rng.random(n) < 0.5) for n in lengths]
    return packing.Tokenized.from_encoded(encoded)


def test_chunks_and_rows():
    corpus = _corpus([3, 0, 25, 4, 1, 10])
    packed = packing.pack(corpus, seq_len=12)  # body of 10 tokens per example
    # doc 2 (25 tokens) -> chunks 10, 10, 5; the empty document is dropped.
    assert packed.length.tolist() == [3, 10, 10, 5, 4, 1, 10]
    assert packed.start.tolist() == [0, 3, 13, 23, 28, 32, 33]
    # Next-fit, 2 specials per example: [3] [10] [10] [5] [4, 1] [10] ((5+2)+(4+2) = 13 > 12).
    assert packed.row_offsets.tolist() == [0, 1, 2, 3, 4, 6, 7]
    used = [sum(packed.length[a:b] + 2) for a, b in zip(packed.row_offsets[:-1], packed.row_offsets[1:])]
    assert all(u <= 12 for u in used)
    assert packed.row_offsets[-1] == 7 and packed.length.sum() == corpus.num_tokens


@pytest.mark.parametrize("seq_len", [8, 33])
def test_rows_cover_every_token_once(seq_len):
    corpus = _corpus([1, 5, 40, 7, 7, 2, 100, 3])
    packed = packing.pack(corpus, seq_len)
    seen = []
    for r in range(packed.num_rows):
        ids, starts, maskable, positions, segments = packing.assemble(
            corpus, packed, r, cls_id=CLS, sep_id=SEP)
        assert ids.shape == (seq_len,) and ids.dtype == np.int32
        assert (ids[segments == 0] == 0).all() and not maskable[segments == 0].any()
        for seg in range(1, segments.max() + 1):
            where = np.flatnonzero(segments == seg)
            assert (np.diff(where) == 1).all()  # an example is contiguous
            assert positions[where].tolist() == list(range(where.size))  # restarts at 0
            assert ids[where[0]] == CLS and ids[where[-1]] == SEP
            assert maskable[where].tolist() == [False] + [True] * (where.size - 2) + [False]
            assert starts[where[1]]  # an example never begins inside a word
            seen.extend(ids[where[1:-1]].tolist())
        # padding only after the last example
        if (segments == 0).any():
            assert (segments[np.argmax(segments == 0):] == 0).all()
    assert seen == corpus.tokens.tolist()


def test_row_maker_randomized_positions():
    corpus = _corpus([5, 6, 7])
    packed = packing.pack(corpus, 32)
    maker = packing.RowMaker(corpus, packed, seed=0, rate=0.15, whole_word=True, cls_id=CLS,
                             sep_id=SEP, mask_id=4, vocab_size=100, num_special=5,
                             randomized_max_length=1000)
    row = maker(0, epoch=0)
    for seg in range(1, row["segment_ids"].max() + 1):
        p = row["positions"][row["segment_ids"] == seg]
        assert (np.diff(p) > 0).all() and p.min() >= 0 and p.max() < 1000
    assert (maker(0, 0)["positions"] == row["positions"]).all()
    assert (maker(0, 1)["positions"] != row["positions"]).any()


def test_seq_len_too_small():
    with pytest.raises(ValueError):
        packing.pack(_corpus([3]), 2)


def test_sop_rows_swap_halves():
    corpus = _corpus([40, 1, 9])
    packed = packing.pack(corpus, 16, sop=True)
    # body of 13 tokens; chunks of 1 token (the tail of doc 0, all of doc 1) cannot be split.
    assert packed.length.tolist() == [13, 13, 13, 9]
    assert packed.num_rows == packed.length.size  # one chunk per row
    labels = set()
    for seed in range(20):
        rng = np.random.default_rng(seed)
        ids, starts, maskable, pos, seg, types, label = packing.assemble_sop(
            corpus, packed, 0, rng, cls_id=CLS, sep_id=SEP)
        labels.add(label)
        seps = np.flatnonzero(ids == SEP)
        a, b = ids[1:seps[0]], ids[seps[0] + 1:seps[1]]
        chunk = corpus.tokens[packed.start[0]:packed.start[0] + packed.length[0]].tolist()
        assert (a.tolist() + b.tolist() if label == 0 else b.tolist() + a.tolist()) == chunk
        assert a.size and b.size and starts[1] and starts[seps[0] + 1]
        assert maskable.sum() == len(chunk)
    assert labels == {0, 1}
