"""Evaluation rows: held-out long documents with FIXED masks, shared by every method.

`rows(run, length, settings)` asks posjax.data.long_documents for `num_docs` rows of exactly
`length` tokens (windows of the concatenated held-out documents, masks fixed by the seed), so
every method of a run at a length sees the same tokens and the same masked places. Runs whose
data fields and vocabulary agree get the same rows too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Iterator, Optional

import numpy as np

DATA_KEYS = ("corpus", "path", "tfds_name", "tfds_split", "tfds_text_key", "max_documents",
             "heldout_fraction", "split_seed", "mask_rate", "whole_word", "tokenizer")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything besides the run and the method that changes the numbers of a cell."""

    num_docs: int = 8
    min_tokens: int = 0  # rows per length = max(num_docs, min_tokens // length)
    seed: int = 0
    batch_tokens: int = 16384
    corpus: Optional[str] = None  # override config.data.corpus (e.g. 'text_dir')
    data_path: Optional[str] = None
    max_documents: Optional[int] = None  # override; 0 = all documents
    cache_dir: Optional[str] = None

    def count(self, length: int) -> int:
        """Rows at `length`: short lengths get more rows so every length scores enough tokens."""
        return max(self.num_docs, self.min_tokens // length)

    def key(self) -> str:
        """Short hash of the fields that change results (batch size does not)."""
        fields = [self.num_docs, self.seed, self.corpus, self.data_path, self.max_documents]
        if self.min_tokens:
            fields.append(self.min_tokens)
        return hashlib.blake2b(json.dumps(fields).encode(), digest_size=4).hexdigest()


_CACHE: dict = {}


def data_config(run, settings: Settings):
    """The run's config with the evaluator's data overrides applied (a copy)."""
    import ml_collections

    cfg = ml_collections.ConfigDict(run.config.to_dict())
    if settings.corpus:
        cfg.data.corpus = settings.corpus
    if settings.data_path:
        cfg.data.path = settings.data_path
    if settings.max_documents is not None:
        cfg.data.max_documents = settings.max_documents or None
    return cfg


def rows(run, length: int, settings: Settings) -> dict[str, np.ndarray]:
    """[num_docs, length] arrays of the batch contract (cached per data config and length)."""
    from posjax.data import long_documents

    cfg = data_config(run, settings)
    key = (json.dumps({k: cfg.data.get(k, None) for k in DATA_KEYS}, sort_keys=True, default=str),
           run.tokenizer.fingerprint(), length, settings.count(length), settings.seed)
    if key not in _CACHE:
        _CACHE.clear()  # one length at a time is enough; long rows are big
        _CACHE[key] = long_documents(cfg, run.tokenizer, int(length), int(settings.count(length)),
                                     int(settings.seed), workdir=settings.cache_dir)
    return _CACHE[key]


def for_method(base: dict[str, np.ndarray], window: Optional[int], causal: bool) -> dict:
    """The model inputs for one method: truncate windows; causal models read unmasked text."""
    batch = {k: v for k, v in base.items() if k in (
        "input_ids", "token_type_ids", "positions", "segment_ids", "mlm_targets", "mlm_weights")}
    length = batch["input_ids"].shape[1]
    if window is not None and window < length:
        idx = np.arange(length)
        batch["positions"] = np.broadcast_to((idx % window).astype(np.int32), (len(base["input_ids"]), length)).copy()
        batch["segment_ids"] = np.broadcast_to((idx // window + 1).astype(np.int32), (len(base["input_ids"]), length)).copy()
    if causal:
        original = np.where(batch["mlm_weights"] > 0, batch["mlm_targets"], batch["input_ids"])
        batch["input_ids"] = original.astype(np.int32)
        batch["original_ids"] = batch["input_ids"]
        batch["real"] = (base["segment_ids"] > 0).astype(np.float32)
    return batch


def batches(batch: dict[str, np.ndarray], batch_rows: int) -> Iterator[dict[str, np.ndarray]]:
    """Fixed-size batches (one compile per cell): the last one is padded with copies of row 0
    whose weights are zero, so they add nothing to any sum."""
    n = batch["input_ids"].shape[0]
    for start in range(0, n, batch_rows):
        part = {k: v[start:start + batch_rows] for k, v in batch.items()}
        short = batch_rows - part["input_ids"].shape[0]
        if short:
            pad = {k: np.repeat(v[:1], short, axis=0) for k, v in part.items()}
            for k in ("mlm_weights", "real"):
                if k in pad:
                    pad[k] = np.zeros_like(pad[k])
            part = {k: np.concatenate([part[k], pad[k]]) for k in part}
        yield part


def rows_per_batch(length: int, settings: Settings) -> int:
    return max(1, min(settings.count(length), settings.batch_tokens // length))
