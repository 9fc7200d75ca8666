"""The evaluation stream (posjax.data.heldout) on a hand-made stream: every length scores the
same masked tokens exactly once, rows stay inside documents when they can, crossings counted."""

from __future__ import annotations

import numpy as np
import pytest

from posjax.data import heldout
from posjax.errors import ConfigError

CLS, SEP = 101, 102


def make_stream(doc_lengths, seed=0):
    """Documents of the given lengths (each with its trailing [SEP]), 30% of tokens masked."""
    rng = np.random.default_rng(seed)
    doc = np.concatenate([np.full(n + 1, d, np.int32) for d, n in enumerate(doc_lengths)])
    ids = rng.integers(200, 300, doc.size).astype(np.int32)
    ends = np.r_[np.flatnonzero(np.diff(doc)), doc.size - 1]
    ids[ends] = SEP
    weights = ((rng.random(doc.size) < 0.3) & (ids != SEP)).astype(np.float32)
    inputs = np.where(weights > 0, 103, ids).astype(np.int32)
    targets = np.where(weights > 0, ids, 0).astype(np.int32)
    return heldout.Stream(ids, inputs, targets, weights, doc, False)


@pytest.mark.parametrize("doc_lengths", [[50, 7, 5, 30, 3], [200], [4, 4, 4, 4, 4, 4, 90]])
def test_every_length_scores_each_masked_token_once(doc_lengths):
    stream = make_stream(doc_lengths)
    masked = np.flatnonzero(stream.weights)
    for length in range(3, stream.size + 3):
        rows = heldout.stream_rows(stream, length, cls_id=CLS, sep_id=SEP)
        a = rows.arrays
        assert a["input_ids"].shape[1] == length
        assert (a["input_ids"][:, 0] == CLS).all() and (a["input_ids"][:, -1] == SEP).all()
        w = a["mlm_weights"] > 0
        np.testing.assert_array_equal(np.sort(rows.stream_index[w]), masked)
        np.testing.assert_array_equal(a["mlm_targets"][w], stream.ids[rows.stream_index[w]])
        np.testing.assert_array_equal(a["input_ids"][:, 1:-1],
                                      stream.inputs[rows.stream_index[:, 1:-1]])


def test_rows_stay_inside_long_documents_and_crossings_are_counted():
    stream = make_stream([50, 7, 5, 30, 3])  # documents of 51, 8, 6, 31, 4 tokens with [SEP]
    rows = heldout.stream_rows(stream, 12, cls_id=CLS, sep_id=SEP)  # 10 tokens a row
    # doc 0: 6 rows inside it; docs 1+2 joined (14 tokens: 2 rows, both crossing);
    # doc 3 and the short tail doc 4 (35 tokens): 4 rows, the last one crosses
    assert rows.crossing == 3
    assert rows.cluster.tolist() == [0] * 6 + [1, 1] + [3] * 4
    assert rows.crosses.tolist() == [False] * 6 + [True, True] + [False] * 3 + [True]
    one = heldout.stream_rows(make_stream([200]), 50, cls_id=CLS, sep_id=SEP)
    assert one.crossing == 0 and set(one.cluster.tolist()) == {0}


def test_a_length_the_stream_cannot_fill_is_refused():
    stream = make_stream([10, 10])  # 22 tokens
    heldout.check_length(stream, 24)
    with pytest.raises(ConfigError, match=r"lengths=25.*at most 24 \(\[CLS\], the stream's 22 "
                                          r"tokens, \[SEP\];"):
        heldout.check_length(stream, 25)
    with pytest.raises(ConfigError, match="lengths"):
        heldout.stream_rows(stream, 2, cls_id=CLS, sep_id=SEP)


def test_cluster_spans_cut_documents_into_fixed_blocks_numbered_in_stream_order():
    stream = make_stream([50, 7, 5, 30, 3])  # documents of 51, 8, 6, 31, 4 tokens with [SEP]
    spans = heldout.token_clusters(stream, 20)
    # doc 0: [0, 20) [20, 40) [40, 51); docs 1, 2: one span each; doc 3: [0, 20) [20, 31); doc 4
    sizes = np.bincount(spans).tolist()
    assert sizes == [20, 20, 11, 8, 6, 20, 11, 4]
    assert (np.diff(spans) >= 0).all()  # numbered in stream order
    np.testing.assert_array_equal(heldout.token_clusters(stream, 0), stream.doc)
    rows = heldout.stream_rows(stream, 12, cls_id=CLS, sep_id=SEP, cluster_tokens=20)
    # row starts 0, 10, ..., 41 (doc 0), 51, 55 (docs 1+2), 65, 75, 85, 90 (docs 3+4)
    assert rows.cluster.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 5, 5, 6, 6]
    default = heldout.stream_rows(stream, 12, cls_id=CLS, sep_id=SEP)
    assert default.cluster.tolist() == [0] * 6 + [1, 1] + [3] * 4  # one cluster per document
    np.testing.assert_array_equal(rows.arrays["mlm_weights"], default.arrays["mlm_weights"])


@pytest.mark.parametrize("bad", [-1, 2.5, True, "8"])
def test_a_bad_cluster_span_is_refused(bad):
    with pytest.raises(ConfigError, match="cluster_tokens"):
        heldout.token_clusters(make_stream([10]), bad)
