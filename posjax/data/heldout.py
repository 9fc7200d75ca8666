"""The evaluation stream: one held-out token stream with ONE fixed set of masked places, cut
into rows of any length so that every length scores exactly the same masked tokens.

    stream = build_stream(config, tokenizer, masked_tokens=32768, seed=0)
    rows = stream_rows(stream, length=512, cls_id=tok.cls_id, sep_id=tok.sep_id)

The stream is the run's held-out documents in corpus order, each followed by [SEP], until it
holds about `masked_tokens / mask_rate` maskable tokens (the last document is cut there; if
the held-out split is smaller the whole of it is used and `Stream.short` says so). The masked
places are chosen ONCE on the whole stream (posjax.data.masking.choose with the corpus' rate
and whole-word rule), and their corruption (80% [MASK], 10% random, 10% kept) is decided once
too, so the input a model sees at a masked place is the same at every length.

A length L holds b = L - 2 stream tokens per row ([CLS] b tokens [SEP]). The stream is split
into UNITS: a document at least b tokens long is a unit of its own; shorter documents are
joined with the following ones (their [SEP]s stay in between) until the unit holds b tokens;
a remainder shorter than b joins the unit before it. Inside a unit of n tokens the rows are
the consecutive windows [0, b), [b, 2b), ... and, when b does not divide n, one last window
[n - b, n) that scores only the tokens the window before it did not reach ([kb, n)). So

  * every stream token is scored by exactly one row at every length (the scored SET is the
    same for every L; only the context around it changes),
  * a row crosses a document boundary only where documents shorter than b must be joined:
    with KJV books (long documents) rows stay inside one book, with People's Daily articles
    (short) rows of 8k tokens join many articles. `Rows.crossing` counts them.

Every row also names its CLUSTER, the unit intervals resample (posjax.evaluation.stats.intervals):
rows of one long document are correlated. By default (`cluster_tokens=0`) a cluster is the
document of the row's first token. A few long documents give too few clusters (six KJV books:
462 distinct resamples, intervals too narrow), so `cluster_tokens=N` cuts every document into
fixed spans of N stream tokens from its start ([0, N), [N, 2N), ...; the last span may be
shorter) and a row's cluster is the span of its first token. Cluster ids are numbered in
stream order, so the same N gives the same ids at every length.
Causal LMs (mask rate 0) mask nothing; their scorer predicts every next token of a window.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import numpy as np

from posjax import schema
from posjax.data import masking, pipeline
from posjax.data.scored_rows import Rows
from posjax.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_MASKED_TOKENS = 32768
DOCUMENT_CLUSTERS = 0  # cluster_tokens value: one cluster per document (the default)
CAUSAL_RATE = 0.15  # causal runs take as much text as an MLM with BERT's rate would


@dataclasses.dataclass
class Stream:
    """The held-out stream with its fixed masks. Arrays are [N] (N = stream tokens)."""

    ids: np.ndarray  # int32 original ids; each document ends with [SEP]
    inputs: np.ndarray  # int32 ids after masking (what the model reads)
    targets: np.ndarray  # int32 the original id at masked places, 0 elsewhere
    weights: np.ndarray  # float32 1 at masked places
    doc: np.ndarray  # int32 index (in the stream) of the document of each token
    short: bool  # the held-out split had fewer masked tokens than asked for

    @property
    def size(self) -> int:
        return int(self.ids.size)

    @property
    def masked(self) -> int:
        return int(np.count_nonzero(self.weights))


def build_stream(config: Any, tokenizer, masked_tokens: int = DEFAULT_MASKED_TOKENS,
                 seed: int = 0, *, workdir: str | None = None) -> Stream:
    """The held-out stream of `config`'s corpus with about `masked_tokens` masked places."""
    if not isinstance(masked_tokens, int) or isinstance(masked_tokens, bool) or masked_tokens < 1:
        raise ConfigError("masked_tokens", masked_tokens, "a positive int")
    rate = masking.mask_rate(config)
    corpus = pipeline.tokenized(config, tokenizer, "heldout", workdir)
    special = [tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id]
    need = math.ceil(masked_tokens / (rate or CAUSAL_RATE))  # maskable tokens to take
    ids, starts, doc = [], [], []
    have = 0
    for d in range(corpus.num_documents):
        lo, hi = int(corpus.offsets[d]), int(corpus.offsets[d + 1])
        if hi == lo:
            continue
        toks = corpus.tokens[lo:hi]
        ok = ~np.isin(toks, special)
        cut = toks.size
        if have + int(ok.sum()) > need:  # cut the last document where the budget is reached
            cut = int(np.searchsorted(np.cumsum(ok), need - have, side="left")) + 1
        ws = corpus.word_starts[lo:lo + cut].copy()
        ws[0] = True
        ids += [toks[:cut], [tokenizer.sep_id]]
        starts += [ws, [True]]
        doc.append(np.full(cut + 1, len(doc), np.int32))
        have += int(ok[:cut].sum())
        if have >= need:
            break
    if not doc:
        raise ConfigError("data.heldout_fraction", schema.view(config).data.heldout_fraction,
                          "a fraction that leaves at least one non-empty held-out document")
    ids = np.concatenate(ids).astype(np.int32)
    starts = np.concatenate(starts).astype(bool)
    short = have < need
    if short:
        log.warning("held-out split holds %d maskable tokens, fewer than the %d asked for: "
                    "using all of it", have, need)
    maskable = ~np.isin(ids, special)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 14]))
    if rate > 0:
        chosen = masking.choose(maskable, starts, rng, rate,
                                bool(schema.view(config).data.whole_word))
        inputs, targets, weights = masking.corrupt(
            ids, chosen, rng, mask_id=tokenizer.mask_id, vocab_size=tokenizer.vocab_size,
            num_special=tokenizer.num_special)
    else:
        inputs, targets, weights = ids.copy(), np.zeros_like(ids), np.zeros(ids.shape, np.float32)
    return Stream(ids, inputs.astype(np.int32), targets.astype(np.int32),
                  weights.astype(np.float32), np.concatenate(doc), short)


def units(stream: Stream, body: int) -> list[tuple[int, int]]:
    """[start, end) stream spans of the units for rows of `body` stream tokens (see above)."""
    bounds = np.flatnonzero(np.diff(stream.doc)) + 1
    edges = [0, *bounds.tolist(), stream.size]
    out: list[list[int]] = []
    start = 0
    for end in edges[1:]:
        if end - start >= body:
            out.append([start, end])
            start = end
    if start < stream.size:  # a remainder shorter than one row joins the unit before it
        out[-1][1] = stream.size  # (out is not empty: check_length made size >= body)
    return [(a, b) for a, b in out]


def check_length(stream: Stream, length: int) -> None:
    """ConfigError unless `length` is an int >= 3 that the stream fills at least once."""
    if not isinstance(length, int) or isinstance(length, bool) or length < 3:
        raise ConfigError("lengths", length, "ints >= 3 (a row is [CLS] tokens [SEP])")
    if length - 2 > stream.size:
        raise ConfigError("lengths", length, f"a length the held-out stream can fill at least "
                          f"once: at most {stream.size + 2} ([CLS], the stream's {stream.size} "
                          "tokens, [SEP]; a lower --masked_tokens only makes the stream shorter)")


def windows(stream: Stream, length: int) -> list[tuple[int, int]]:
    """(window start, first scored stream token) per row; a row scores [scored, start + b)."""
    check_length(stream, length)
    body = length - 2
    out = []
    for a, b in units(stream, body):
        full = (b - a) // body
        out += [(a + k * body, a + k * body) for k in range(full)]
        if (b - a) % body:
            out.append((b - body, a + full * body))
    return out


def check_cluster_tokens(cluster_tokens) -> int:
    """`cluster_tokens` as an int >= 0 (0: one cluster per document) or ConfigError."""
    if (not isinstance(cluster_tokens, int) or isinstance(cluster_tokens, bool)
            or cluster_tokens < 0):
        raise ConfigError("cluster_tokens", cluster_tokens, "an int >= 0 (stream tokens per "
                          "cluster span inside a document; 0 = one cluster per document)")
    return int(cluster_tokens)


def token_clusters(stream: Stream, cluster_tokens: int = DOCUMENT_CLUSTERS) -> np.ndarray:
    """[N] int32 cluster of every stream token: its document (cluster_tokens=0), or its span
    of `cluster_tokens` tokens counted from its document's start, numbered in stream order."""
    n = check_cluster_tokens(cluster_tokens)
    if n == DOCUMENT_CLUSTERS:
        return stream.doc.astype(np.int32)
    first = np.r_[0, np.flatnonzero(np.diff(stream.doc)) + 1]  # each document's first token
    start = first[np.searchsorted(first, np.arange(stream.size), side="right") - 1]
    span = (np.arange(stream.size) - start) // n
    new = np.r_[True, (np.diff(stream.doc) != 0) | (np.diff(span) != 0)]
    return (np.cumsum(new) - 1).astype(np.int32)


def stream_rows(stream: Stream, length: int, *, cls_id: int, sep_id: int,
                cluster_tokens: int = DOCUMENT_CLUSTERS) -> Rows:
    """The rows of `length` tokens (see the module docstring); every masked stream token has
    weight 1 in exactly one row. `cluster_tokens`: see the module docstring."""
    clusters = token_clusters(stream, cluster_tokens)
    wins = windows(stream, length)
    body = length - 2
    starts = np.array([w[0] for w in wins], np.int64)
    scored = np.array([w[1] for w in wins], np.int64)
    idx = starts[:, None] + np.arange(body)[None, :]  # [R, b]
    keep = idx >= scored[:, None]  # the last window of a unit re-reads, but does not re-score
    n = len(wins)

    def framed(body_values, edge, dtype):
        col = np.full((n, 1), edge, dtype)
        return np.concatenate([col, body_values.astype(dtype), col], axis=1)

    arrays = {
        "input_ids": framed(stream.inputs[idx], 0, np.int32),
        "token_type_ids": np.zeros((n, length), np.int32),
        "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (n, length)).copy(),
        "segment_ids": np.ones((n, length), np.int32),
        "mlm_targets": framed(np.where(keep, stream.targets[idx], 0), 0, np.int32),
        "mlm_weights": framed(np.where(keep, stream.weights[idx], 0), 0, np.float32),
    }
    arrays["input_ids"][:, 0] = cls_id
    arrays["input_ids"][:, -1] = sep_id
    docs = stream.doc[idx]
    return Rows(arrays=arrays,
                stream_index=framed(idx, -1, np.int64),
                cluster=clusters[idx[:, 0]],
                crosses=docs[:, 0] != docs[:, -1])
