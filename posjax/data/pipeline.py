"""The input pipeline: documents -> tokens -> packed rows -> masked batches (batch contract).

Training batches come from a grain MapDataset (rows shuffled with a seed, reshuffled every
epoch, repeated forever, masked dynamically with (seed, epoch, row)), so the iterator state is
a small JSON-able dict and restoring it replays exactly the same batches. Evaluation batches
are plain numpy with fixed masks.

config.data.batch_size is the GLOBAL batch. A process of a multi-host run asks for its slice
of rows of every global batch (`rows=(lo, hi)`), so what the model sees does not depend on how
many processes feed it (posjax.training.multihost picks the slices).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from typing import Any

import numpy as np

from posjax import schema, storage
from posjax.data import corpora, curriculum, masking, packing, patches, pose, synthetic
from posjax.data.batching import shuffled_batches
from posjax.data.masking import EVAL_SEED, mask_rate
from posjax.data.packing import RowMaker, Tokenized
from posjax.data.tasks import mixing  # config.data.tasks: task rows mixed in
from posjax.errors import ConfigError

log = logging.getLogger(__name__)

_CACHE_VERSION = 1
_MEMORY: dict[str, Tokenized] = {}


def _cfg(config: Any, name: str):
    """config.data.<name> of the schema view (the declared default where the config lacks it)."""
    return schema.view(config).data[name]


# -- tokenized corpus, cached ---------------------------------------------------------------


def _cache_key(config: Any, tokenizer, split: str) -> str:
    fields = [_CACHE_VERSION, split, tokenizer.name, tokenizer.fingerprint()] + [
        # what the config itself sets: declaring a default must not rename existing caches
        str(schema.given(config, f"data.{f}")) for f in (
            "corpus", "path", "tfds_name", "tfds_split", "tfds_text_key", "max_documents",
            "heldout_fraction", "split_seed")]
    if _cfg(config, "corpus") == "synthetic":  # the generator's settings decide the text
        fields.append(synthetic.fingerprint(config))
    return hashlib.blake2b(json.dumps(fields).encode(), digest_size=10).hexdigest()


def tokenized(config: Any, tokenizer, split: str, workdir: str | None = None) -> Tokenized:
    """The tokenized documents of a split, cached in memory and in `workdir/data_cache/`.

    Embedded corpora and TFDS data never change under a key; text_dir files might, so text_dir
    is only cached on disk (a new vocabulary or config gives a new key, an edited file does
    not: delete data_cache/ after editing files).
    """
    key = _cache_key(config, tokenizer, split)
    if key in _MEMORY:
        return _MEMORY[key]
    workdir = workdir or _cfg(config, "cache_dir")
    path = storage.join(workdir, "data_cache", f"tokens-{split}-{key}.npz") if workdir else None
    if path and storage.exists(path):
        with np.load(io.BytesIO(storage.read_bytes(path))) as z:
            result = Tokenized(z["tokens"], z["word_starts"], z["offsets"])
    else:
        docs = corpora.split_documents(config, split)
        result = Tokenized.from_encoded(tokenizer.encode_documents(docs))
        if path:
            buf = io.BytesIO()
            np.savez(buf, tokens=result.tokens, word_starts=result.word_starts, offsets=result.offsets)
            storage.write_bytes(path, buf.getvalue())
    if _cfg(config, "corpus") != "text_dir":
        _MEMORY[key] = result
    return result


# -- checks -----------------------------------------------------------------------------------


def _check(config: Any) -> tuple[int, int]:
    """The fields batching relies on (posjax.config.validation checks them too; library callers may
    not call it)."""
    seq_len = schema.checked(config, "data.seq_len")
    batch = schema.checked(config, "data.batch_size")
    schema.checked(config, "data.mask_rate")
    rml = _cfg(config, "randomized_max_length")
    if rml is not None and (not isinstance(rml, int) or rml < seq_len):
        raise ConfigError("data.randomized_max_length", rml, f"None or an int >= data.seq_len={seq_len}")
    pose.check_config(config)
    return seq_len, batch


def sop_enabled(config: Any) -> bool:
    """ALBERT's sentence-order task (config.model.sop): rows become [CLS] A [SEP] B [SEP]."""
    return bool(schema.view(config).model.sop)


def _pack(config: Any, corpus: Tokenized, seq_len: int):
    sop = sop_enabled(config)
    if sop and seq_len < 5:
        raise ConfigError("data.seq_len", seq_len, "an int >= 5 with model.sop ([CLS] a [SEP] b [SEP])")
    return packing.pack(corpus, seq_len, sop=sop)


def _randomized(config: Any, train: bool) -> int | None:
    """randomized_max_length for this use: training always; evaluation only with
    config.data.randomized_eval (default False: plain 0..n-1 positions at evaluation, as
    posjax.positions.randomized.positions_for does)."""
    if train or _cfg(config, "randomized_eval"):
        return _cfg(config, "randomized_max_length")
    return None


def _pose(config: Any, train: bool) -> dict:
    """PoSE's settings for this use: training only; evaluation always keeps 0..n-1."""
    return {"pose_target_length": _cfg(config, "pose_target_length") if train else 0,
            "pose_chunks": _cfg(config, "pose_chunks")}


def _row_maker(config, tokenizer, corpus: Tokenized, packed, seed: int, train: bool) -> RowMaker:
    return RowMaker(
        corpus=corpus, packing=packed, seed=int(seed), rate=mask_rate(config),
        whole_word=bool(_cfg(config, "whole_word")), cls_id=tokenizer.cls_id,
        sep_id=tokenizer.sep_id, mask_id=tokenizer.mask_id, vocab_size=tokenizer.vocab_size,
        num_special=tokenizer.num_special, randomized_max_length=_randomized(config, train),
        sop=sop_enabled(config), **_pose(config, train))


def _stack(rows: list[dict]) -> dict[str, np.ndarray]:
    # sop_labels are scalars per row: np.stack makes them [B] like the other keys' [B, L].
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


# -- training -------------------------------------------------------------------------------


def make_train_dataset(config: Any, tokenizer, seed: int, *, workdir: str | None = None,
                       rows: tuple[int, int] | None = None):
    """The grain IterDataset of training batches (infinite).

    The order of rows is one global order (a shuffle of all packed rows per epoch, masks drawn
    per (row, epoch)), cut into global batches of data.batch_size rows. `rows=(lo, hi)` keeps
    rows lo..hi-1 of every global batch: what one process of a multi-host run feeds, so the
    union over processes is exactly the one-process batch whatever the process count.
    """
    seq_len, batch = _check(config)
    if _cfg(config, "corpus") == "patches":  # images, not text (posjax.data.patches)
        return patches.make_train_dataset(config, tokenizer, seed, rows)
    corpus = tokenized(config, tokenizer, "train", workdir)
    packed = _pack(config, corpus, seq_len)
    if packed.num_rows == 0:
        raise ConfigError("data.max_documents", _cfg(config, "max_documents"),
                          "enough text for at least one packed row")
    make_row = _row_maker(config, tokenizer, corpus, packed, seed, train=True)
    per_epoch = packed.num_rows
    mix = mixing.make_mixer(config, tokenizer, corpus.tokens, seed, _randomized(config, True),
                            **_pose(config, True))

    def build(index: int, row: int) -> dict[str, np.ndarray]:
        task_row = mix(index) if mix is not None else None
        if task_row is not None:
            return task_row
        # `index` counts global rows drawn so far across epochs, so index // per_epoch is the epoch.
        return make_row(int(row), index // per_epoch)

    return shuffled_batches(per_epoch, seed, build, batch, rows)


def make_train_iterator(config: Any, tokenizer, seed: int, *, workdir: str | None = None,
                        rows: tuple[int, int] | None = None):
    """An infinite grain DatasetIterator of batch-contract dicts (`rows`: see
    make_train_dataset).

    Save its position with `get_iterator_state(it)` (a JSON-able dict) and resume with
    `set_iterator_state(it, state)` on a fresh iterator made with the same config and seed.
    data.corpus='algorithmic': the task's curriculum (posjax.data.curriculum), no text.
    """
    if _cfg(config, "corpus") == "algorithmic":
        return curriculum.make_train_iterator(config, seed, rows)
    return iter(make_train_dataset(config, tokenizer, seed, workdir=workdir, rows=rows))


def get_iterator_state(iterator) -> dict:
    """The iterator's position as a JSON-able dict (store it next to a checkpoint)."""
    state = iterator.get_state()
    json.dumps(state)  # fail here, not at save time, if grain ever returns non-JSON state
    return state


def set_iterator_state(iterator, state: dict) -> None:
    iterator.set_state(state)


# -- evaluation -----------------------------------------------------------------------------


def make_eval_batches(config: Any, tokenizer, num_batches: int, *,
                      workdir: str | None = None) -> list[dict[str, np.ndarray]]:
    """`num_batches` global batches of held-out rows with fixed masks (same every call; a
    process of a multi-host run takes its rows of each).

    Rows are taken in order; when the held-out set has fewer rows than needed it is reused
    with new (still fixed) masks, as the next "epoch".
    """
    if _cfg(config, "corpus") == "algorithmic":  # fixed batches at the training lengths
        return curriculum.make_eval_batches(config, num_batches)
    seq_len, batch = _check(config)
    if _cfg(config, "corpus") == "patches":  # held-out images at the training grid
        return patches.make_eval_batches(config, tokenizer, num_batches)
    corpus = tokenized(config, tokenizer, "heldout", workdir)
    packed = _pack(config, corpus, seq_len)
    if packed.num_rows == 0:
        raise ConfigError("data.heldout_fraction", _cfg(config, "heldout_fraction"),
                          "a fraction that leaves at least one non-empty held-out document")
    make_row = _row_maker(config, tokenizer, corpus, packed, EVAL_SEED, train=False)
    needed = num_batches * batch
    if needed > packed.num_rows:
        log.info("eval: %d held-out rows reused for %d rows", packed.num_rows, needed)
    # Row j of the sequence is held-out row j mod num_rows, masked as epoch j // num_rows.
    return [_stack([make_row(j % packed.num_rows, j // packed.num_rows)
                    for j in range(b * batch, (b + 1) * batch)]) for b in range(num_batches)]


def long_documents(config: Any, tokenizer, length: int, count: int, seed: int, *,
                   workdir: str | None = None) -> dict[str, np.ndarray]:
    """`count` rows of exactly `length` tokens, [CLS] ... [SEP], from held-out documents.

    The held-out documents are read as one stream in order, joined by [SEP] (a document
    shorter than `length` continues into the next one; the [SEP] tells the model where).
    Each row is one example (segment 1, positions 0..length-1, or a sorted random subset of
    [0, randomized_max_length) when data.randomized_eval is on) taken as a window of the stream at a seeded offset: distinct,
    non-overlapping windows while the stream is long enough, wrapping around it otherwise.
    Masks are fixed by `seed`.
    """
    if not isinstance(length, int) or length < 3:
        raise ConfigError("length", length, "an int >= 3")
    if not isinstance(count, int) or count < 1:
        raise ConfigError("count", count, "a positive int")
    rml = _randomized(config, train=False)
    if rml is not None and rml < length:
        raise ConfigError("data.randomized_max_length", rml, f"None or an int >= length={length}")
    corpus = tokenized(config, tokenizer, "heldout", workdir)
    docs = [corpus.tokens[corpus.offsets[d]:corpus.offsets[d + 1]] for d in range(corpus.num_documents)]
    docs = [d for d in docs if d.size]
    if not docs:
        raise ConfigError("data.heldout_fraction", _cfg(config, "heldout_fraction"),
                          "a fraction that leaves at least one non-empty held-out document")
    starts_docs = [corpus.word_starts[corpus.offsets[d]:corpus.offsets[d + 1]]
                   for d in range(corpus.num_documents) if corpus.offsets[d + 1] > corpus.offsets[d]]
    sep = np.array([tokenizer.sep_id], np.int32)
    stream = np.concatenate([x for d in docs for x in (d, sep)])
    stream_starts = np.concatenate([x for s in starts_docs for x in (s, np.ones(1, bool))])
    body = length - 2
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 7]))
    fit = stream.size // body
    if fit >= count:
        shift = int(rng.integers(0, stream.size - fit * body + 1))
        offsets = shift + np.sort(rng.choice(fit, size=count, replace=False)) * body
    else:
        log.warning("long_documents: held-out stream of %d tokens < %d rows x %d; windows wrap",
                    stream.size, count, body)
        offsets = (np.arange(count) * body) % stream.size
    rows = []
    take = lambda a, o: np.take(a, np.arange(o, o + body) % a.size)  # noqa: E731
    for r, o in enumerate(offsets):
        ids = np.concatenate([[tokenizer.cls_id], take(stream, int(o)), [tokenizer.sep_id]]).astype(np.int32)
        starts = np.concatenate([[True], take(stream_starts, int(o)), [True]])
        starts[1] = True
        maskable = ~np.isin(ids, [tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id])
        row_rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 8, r]))
        inputs, targets, weights = _mask(config, tokenizer, ids, starts, maskable, row_rng)
        positions = (packing.randomized_positions(row_rng, length, rml) if rml
                     else np.arange(length, dtype=np.int32))
        rows.append({
            "input_ids": inputs, "token_type_ids": np.zeros(length, np.int32),
            "positions": positions, "segment_ids": np.ones(length, np.int32),
            "mlm_targets": targets, "mlm_weights": weights,
        })
    return _stack(rows)


def _mask(config, tokenizer, ids, starts, maskable, rng):
    return masking.mask_row(
        ids, starts, maskable, rng, rate=mask_rate(config),
        whole_word=bool(_cfg(config, "whole_word")), mask_id=tokenizer.mask_id,
        vocab_size=tokenizer.vocab_size, num_special=tokenizer.num_special)
