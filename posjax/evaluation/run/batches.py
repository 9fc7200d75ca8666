"""Evaluation rows: one held-out stream with ONE fixed set of masks, cut per length.

`rows(run, length, settings)` returns posjax.data.heldout.Rows: the run's held-out stream
(about `settings.masked_tokens` masked tokens, masks fixed by `settings.seed`) cut into rows
of `length` tokens, so every length and every method scores exactly the same masked tokens
and only the context differs. Runs whose data fields and vocabulary agree get the same
stream. `stream(run, settings)` is the stream itself (cached), e.g. to check lengths.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Iterator, Optional

import ml_collections
import numpy as np

from posjax import schema
from posjax.data import heldout, patches
from posjax.evaluation.run import options

DATA_KEYS = ("corpus", "path", "tfds_name", "tfds_split", "tfds_text_key", "max_documents",
             "heldout_fraction", "split_seed", "mask_rate", "whole_word", "tokenizer",
             "synthetic", "patches")
HELDOUT_VERSION = 2  # 1: rows drawn per length; 2: one stream, one mask


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything besides the run and the method that changes the numbers of a cell."""

    masked_tokens: int = options.default("masked_tokens")
    seed: int = 0
    batch_tokens: int = options.default("batch_tokens")
    corpus: Optional[str] = None  # override config.data.corpus (e.g. 'text_dir')
    data_path: Optional[str] = None
    max_documents: Optional[int] = None  # override; 0 = all documents
    cache_dir: Optional[str] = None
    # stream tokens per cluster span (posjax.data.heldout); 0 = one cluster per document
    cluster_tokens: int = options.default("cluster_tokens")

    def key(self) -> str:
        """Short hash of the fields that change results (batch size does not)."""
        fields = [HELDOUT_VERSION, self.masked_tokens, self.seed, self.corpus, self.data_path,
                  self.max_documents]
        if self.cluster_tokens != heldout.DOCUMENT_CLUSTERS:  # older keys stay as they were
            fields.append(["cluster_tokens", int(self.cluster_tokens)])
        return hashlib.blake2b(json.dumps(fields).encode(), digest_size=4).hexdigest()


_STREAMS: dict = {}
_ROWS: dict = {}


def data_config(run, settings: Settings):
    """The run's config with the evaluator's data overrides applied (a copy)."""
    cfg = ml_collections.ConfigDict(run.config.to_dict())
    if settings.corpus:
        cfg.data.corpus = settings.corpus
    if settings.data_path:
        cfg.data.path = settings.data_path
    if settings.max_documents is not None:
        cfg.data.max_documents = settings.max_documents or None
    return cfg


def _stream_key(run, settings: Settings) -> tuple:
    cfg = data_config(run, settings)
    fields = {k: schema.given(cfg, f"data.{k}") for k in DATA_KEYS}  # as given: a cache key
    fields["causal"] = bool(schema.view(cfg).model.causal)
    return (json.dumps(fields, sort_keys=True, default=str), run.tokenizer.fingerprint(),
            settings.masked_tokens, settings.seed)


def stream(run, settings: Settings) -> Optional[heldout.Stream]:
    """The run's held-out stream with its fixed masks (cached per data config); None for
    image runs (data.corpus='patches'), whose every grid has its own held-out images."""
    if patches.is_patches(data_config(run, settings)):
        return None
    key = _stream_key(run, settings)
    if key not in _STREAMS:
        _STREAMS[key] = heldout.build_stream(data_config(run, settings), run.tokenizer,
                                             int(settings.masked_tokens), int(settings.seed),
                                             workdir=settings.cache_dir)
    return _STREAMS[key]


def rows(run, length: int, settings: Settings) -> heldout.Rows:
    """The stream cut into rows of `length` (cached for the last length asked)."""
    key = (_stream_key(run, settings), int(length), settings.cluster_tokens)
    if key not in _ROWS and patches.is_patches(data_config(run, settings)):
        _ROWS.clear()
        _ROWS[key] = patches.eval_rows(data_config(run, settings), run.tokenizer, int(length),
                                       int(settings.masked_tokens), int(settings.seed))
    if key not in _ROWS:
        _ROWS.clear()  # one length at a time is enough; long rows are big
        _ROWS[key] = heldout.stream_rows(stream(run, settings), int(length),
                                         cls_id=run.tokenizer.cls_id,
                                         sep_id=run.tokenizer.sep_id,
                                         cluster_tokens=settings.cluster_tokens)
    return _ROWS[key]


def check_length(run, held: Optional[heldout.Stream], length: int, settings: Settings) -> None:
    """ConfigError unless the run can be scored at `length`: a length its held-out stream
    fills, or for image runs a square grid * grid."""
    if patches.is_patches(data_config(run, settings)):
        patches.grid_of(length, "lengths")
    else:
        heldout.check_length(held, length)


def for_method(base: dict[str, np.ndarray], window: Optional[int], causal: bool, *,
               shuffle_seed: Optional[int] = None) -> dict:
    """The model inputs for one method: truncate windows; causal models read unmasked text;
    `shuffle_seed` set: each row's position ids are a random permutation of themselves
    (row r uses the Generator seeded with (shuffle_seed, r): the same for every run)."""
    batch = {k: v for k, v in base.items() if k in (
        "input_ids", "token_type_ids", "positions", "segment_ids", "mlm_targets", "mlm_weights")}
    n, length = batch["input_ids"].shape
    if window is not None and window < length:
        idx = np.arange(length)
        batch["positions"] = np.broadcast_to((idx % window).astype(np.int32), (n, length)).copy()
        batch["segment_ids"] = np.broadcast_to((idx // window + 1).astype(np.int32), (n, length)).copy()
    if shuffle_seed is not None:
        batch["positions"] = np.stack([
            np.random.default_rng(np.random.SeedSequence([int(shuffle_seed) & 0xFFFFFFFF, 33, r]))
            .permutation(batch["positions"][r]) for r in range(n)]).astype(np.int32)
    if causal:
        original = np.where(batch["mlm_weights"] > 0, batch["mlm_targets"], batch["input_ids"])
        batch["input_ids"] = original.astype(np.int32)
        batch["original_ids"] = batch["input_ids"]
        batch["real"] = (base["segment_ids"] > 0).astype(np.float32)
    else:
        # The LM head runs only at masked places: P = the most any row of this length has
        # (masks are fixed on the stream, so a row may hold more than round(rate * L)).
        count = int((batch["mlm_weights"] > 0).sum(axis=1).max(initial=0))
        if 0 < count < length:
            order = np.argsort(batch["mlm_weights"] <= 0, axis=1, kind="stable")
            batch["mlm_positions"] = order[:, :count].astype(np.int32)
    return batch


def batches(batch: dict[str, np.ndarray],
            batch_rows: int) -> Iterator[tuple[dict[str, np.ndarray], int]]:
    """(batch, real rows) of a fixed size (one compile per cell): the last one is padded with
    copies of row 0 whose weights are zero, so they add nothing to any sum."""
    n = batch["input_ids"].shape[0]
    for start in range(0, n, batch_rows):
        part = {k: v[start:start + batch_rows] for k, v in batch.items()}
        real = part["input_ids"].shape[0]
        short = batch_rows - real
        if short:
            pad = {k: np.repeat(v[:1], short, axis=0) for k, v in part.items()}
            for k in ("mlm_weights", "real"):
                if k in pad:
                    pad[k] = np.zeros_like(pad[k])
            part = {k: np.concatenate([part[k], pad[k]]) for k in part}
        yield part, real


def rows_per_batch(length: int, num_rows: int, settings: Settings) -> int:
    return max(1, min(num_rows, settings.batch_tokens // length))
