"""posjax.data.pipeline: the batch contract, iterator state save/restore, epochs, sharding,
evaluation batches, long documents, the tokenized-corpus cache and config errors."""

from __future__ import annotations

import json
import os
import shutil

import ml_collections
import numpy as np
import pytest

from posjax import data
from posjax.data import pipeline
from posjax.errors import ConfigError

KEYS = {"input_ids": np.int32, "token_type_ids": np.int32, "positions": np.int32,
        "segment_ids": np.int32, "mlm_targets": np.int32, "mlm_weights": np.float32}


def _originals(batch):
    """Row contents before masking (targets hold the original ids where a token was chosen)."""
    return np.where(batch["mlm_weights"] > 0, batch["mlm_targets"], batch["input_ids"])


def _check_contract(batch, rows, length, tok):
    assert set(batch) == set(KEYS)
    for key, dtype in KEYS.items():
        assert batch[key].shape == (rows, length) and batch[key].dtype == dtype, key
    orig = _originals(batch)
    seg = batch["segment_ids"]
    assert (orig[:, 0] == tok.cls_id).all() and (seg[:, 0] == 1).all()
    assert (orig[seg == 0] == tok.pad_id).all() and (batch["mlm_weights"][seg == 0] == 0).all()
    specials = np.isin(orig, [tok.cls_id, tok.sep_id, tok.pad_id])
    assert (batch["mlm_weights"][specials] == 0).all()
    assert (batch["mlm_targets"][batch["mlm_weights"] == 0] == 0).all()
    assert (batch["positions"][orig == tok.cls_id] == 0).all()  # restart per example
    assert (batch["mlm_weights"].sum(1) >= 1).all()


def test_train_batches_contract(make_config, chars):
    config = make_config(whole_word=True)
    it = data.make_train_iterator(config, chars, seed=0)
    for _ in range(3):
        _check_contract(next(it), 4, 64, chars)


def test_state_restore_gives_same_batches_across_epochs(make_config, chars):
    config = make_config(max_documents=6, seq_len=32)
    it = data.make_train_iterator(config, chars, seed=5)
    rows_per_epoch = len(pipeline.packing.pack(pipeline.tokenized(config, chars, "train"), 32).start)
    for _ in range(3):
        next(it)
    state = data.get_iterator_state(it)
    state = json.loads(json.dumps(state))  # JSON round trip, as a checkpoint would store it
    expected = [next(it) for _ in range(rows_per_epoch)]  # runs past at least one epoch end
    again = data.make_train_iterator(config, chars, seed=5)
    data.set_iterator_state(again, state)
    for want in expected:
        got = next(again)
        for key in KEYS:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_epochs_reshuffle_and_remask(make_config, chars):
    config = make_config(max_documents=5, seq_len=32, batch_size=1, heldout_fraction=0.2)
    packed = pipeline.packing.pack(pipeline.tokenized(config, chars, "train"), 32)
    n = packed.num_rows
    it = data.make_train_iterator(config, chars, seed=1)
    epochs = [[next(it) for _ in range(n)] for _ in range(2)]
    keys = [[_originals(b)[0].tobytes() for b in e] for e in epochs]
    assert sorted(keys[0]) == sorted(keys[1]) and len(set(keys[0])) == n  # each row once per epoch
    assert keys[0] != keys[1]  # new order
    masks = [{k: b["mlm_weights"][0].tobytes() for k, b in zip(ks, e)} for ks, e in zip(keys, epochs)]
    assert sum(masks[0][k] != masks[1][k] for k in keys[0]) > n // 2  # new masks


def test_process_slices_make_the_one_process_batch(make_config, chars):
    # Two processes feeding rows (0, 2) and (2, 4) of each global batch of 4 together feed
    # exactly what one process would, masks included, batch after batch.
    config = make_config(max_documents=8, seq_len=32, batch_size=4)
    whole = data.make_train_iterator(config, chars, seed=0)
    halves = [data.make_train_iterator(config, chars, seed=0, rows=r) for r in ((0, 2), (2, 4))]
    for _ in range(3):
        parts = [next(it) for it in halves]
        assert parts[0]["input_ids"].shape == (2, 32)
        batch = next(whole)
        for key in KEYS:
            np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), batch[key])


def test_eval_batches_fixed(make_config, chars):
    config = make_config(heldout_fraction=0.1)
    a = data.make_eval_batches(config, chars, 3)
    b = data.make_eval_batches(config, chars, 3)
    assert len(a) == 3
    for x, y in zip(a, b):
        _check_contract(x, 4, 64, chars)
        for key in KEYS:
            np.testing.assert_array_equal(x[key], y[key])
    train = {_originals(b)[i].tobytes() for b in [next(data.make_train_iterator(config, chars, 0))]
             for i in range(4)}
    assert not train & {_originals(x)[i].tobytes() for x in a for i in range(4)}


def test_randomized_positions(make_config, chars):
    config = make_config(randomized_max_length=512)
    batch = next(data.make_train_iterator(config, chars, seed=0))
    for row, seg in zip(batch["positions"], batch["segment_ids"]):
        for s in range(1, seg.max() + 1):
            p = row[seg == s]
            assert (np.diff(p) > 0).all() and p.max() < 512
    with pytest.raises(ConfigError, match="randomized_max_length"):
        data.make_train_iterator(make_config(randomized_max_length=32), chars, seed=0)
    # Evaluation keeps 0..n-1 unless data.randomized_eval asks otherwise.
    plain = data.make_eval_batches(config, chars, 1)[0]
    for row, seg in zip(plain["positions"], plain["segment_ids"]):
        for s in range(1, seg.max() + 1):
            assert row[seg == s].tolist() == list(range((seg == s).sum()))
    config.data.randomized_eval = True
    rand = data.make_eval_batches(config, chars, 1)[0]
    assert rand["positions"].max() > 64


def test_sentence_order_rows(make_config, chars):
    config = make_config(seq_len=48)
    config.model = {"sop": True}
    batch = next(data.make_train_iterator(config, chars, seed=0))
    assert batch["sop_labels"].shape == (4,) and batch["sop_labels"].dtype == np.int32
    orig = _originals(batch)
    for r in range(4):
        seps = np.flatnonzero(orig[r] == chars.sep_id)
        assert orig[r, 0] == chars.cls_id and seps.size == 2
        types = batch["token_type_ids"][r]
        assert (types[:seps[0] + 1] == 0).all() and (types[seps[0] + 1:seps[1] + 1] == 1).all()
        assert (types[seps[1] + 1:] == 0).all()
        assert (batch["segment_ids"][r, :seps[1] + 1] == 1).all()
        assert (batch["segment_ids"][r, seps[1] + 1:] == 0).all()
        assert batch["positions"][r, :seps[1] + 1].tolist() == list(range(seps[1] + 1))
    labels = np.concatenate([b["sop_labels"] for b in data.make_eval_batches(config, chars, 8)])
    assert 0.25 < labels.mean() < 0.75  # both orders occur


def test_long_documents(make_config, wordpiece):
    config = make_config(corpus="kjv", tokenizer="wordpiece", max_documents=12, heldout_fraction=0.3)
    batch = data.long_documents(config, wordpiece, length=2048, count=3, seed=0)
    _check_contract(batch, 3, 2048, wordpiece)
    np.testing.assert_array_equal(batch["positions"], np.tile(np.arange(2048), (3, 1)))
    assert (batch["segment_ids"] == 1).all()
    assert (_originals(batch)[:, -1] == wordpiece.sep_id).all()
    assert abs(batch["mlm_weights"].mean() - 0.15) < 0.01
    again = data.long_documents(config, wordpiece, length=2048, count=3, seed=0)
    np.testing.assert_array_equal(again["input_ids"], batch["input_ids"])
    other = data.long_documents(config, wordpiece, length=2048, count=3, seed=1)
    assert (other["input_ids"] != batch["input_ids"]).any()
    # Longer than the whole held-out stream: windows wrap, rows still exact.
    huge = data.long_documents(config, wordpiece, length=300_000, count=1, seed=0)
    assert huge["input_ids"].shape == (1, 300_000)


def test_tokenized_cache_on_disk(tmp_path, text_dir, make_config, chars):
    workdir = str(tmp_path / "work")
    config = make_config(corpus="text_dir", path=text_dir, max_documents=None, heldout_fraction=0.0)
    first = pipeline.tokenized(config, chars, "train", workdir)
    assert os.listdir(os.path.join(workdir, "data_cache"))
    shutil.rmtree(text_dir)  # the cache alone now serves the corpus
    second = pipeline.tokenized(config, chars, "train", workdir)
    np.testing.assert_array_equal(first.tokens, second.tokens)
    np.testing.assert_array_equal(first.offsets, second.offsets)


def test_text_dir_end_to_end_with_wordpiece(tmp_path, text_dir, make_config):
    config = make_config(corpus="text_dir", path=text_dir, tokenizer="wordpiece", vocab_size=200,
                         max_documents=None, heldout_fraction=0.0, seq_len=32, whole_word=True)
    tok = data.load_or_build(config, str(tmp_path))
    batch = next(data.make_train_iterator(config, tok, seed=0, workdir=str(tmp_path)))
    _check_contract(batch, 4, 32, tok)


def test_bad_configs(make_config, chars):
    with pytest.raises(ConfigError, match="data.batch_size=3"):
        data.make_train_iterator(make_config(batch_size=3), chars, 0, rows=(2, 4))
    with pytest.raises(ConfigError, match="data.seq_len"):
        data.make_train_iterator(make_config(seq_len=2), chars, 0)
    with pytest.raises(ConfigError, match="data.mask_rate"):
        data.make_eval_batches(make_config(mask_rate=1.5), chars, 1)
    with pytest.raises(ConfigError, match="peoples_daily, kjv, text_dir, tfds"):
        data.make_train_iterator(make_config(corpus="pile"), chars, 0)
    with pytest.raises(ConfigError, match="length"):
        data.long_documents(make_config(), chars, length=2, count=1, seed=0)


def test_causal_models_get_unmasked_inputs(make_config, chars):
    # A causal LM predicts the next ORIGINAL token from its inputs: nothing may be corrupted.
    config = make_config()
    config.model = ml_collections.ConfigDict({"causal": True, "sop": False})
    batch = next(data.make_train_iterator(config, chars, seed=0))
    assert (batch["mlm_weights"] == 0).all() and (batch["mlm_targets"] == 0).all()
    assert not (batch["input_ids"] == chars.mask_id).any()
    config.model.causal = False
    masked = next(data.make_train_iterator(config, chars, seed=0))
    assert (masked["mlm_weights"].sum(1) >= 1).all()
