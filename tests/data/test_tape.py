"""The algorithmic tape (posjax.data.tape) and the curriculum (posjax.data.curriculum)."""

from __future__ import annotations

import collections

import ml_collections
import numpy as np
import pytest

from posjax.data import curriculum, tape
from posjax.errors import ConfigError
from tests.algorithmic_stand_in import ReverseWithEnd

TASK = ReverseWithEnd()


def _sample(n=3, batch=2, seed=0):
    return TASK.sample(np.random.default_rng(seed), batch, n)


def test_tape_is_inputs_then_one_empty_token_per_output_then_padding():
    s = _sample(n=3)
    b = tape.tape_batch(s, TASK.input_size, length=12)
    n, m = 3, TASK.output_length(3)  # 5 outputs: 8 real places, 4 padding
    f = tape.FIRST_SYMBOL
    np.testing.assert_array_equal(b["input_ids"][:, :n], f + s.inputs)
    assert (b["input_ids"][:, n:n + m] == f + TASK.input_size).all()
    assert (b["input_ids"][:, n + m:] == 0).all()
    np.testing.assert_array_equal(b["segment_ids"][0], [1] * 8 + [0] * 4)
    np.testing.assert_array_equal(b["positions"][1], list(range(8)) + [0] * 4)
    np.testing.assert_array_equal(b["mlm_targets"][:, n:n + m], s.outputs)
    assert (b["mlm_targets"][:, :n] == 0).all() and (b["mlm_targets"][:, n + m:] == 0).all()
    # the reference's loss reads every output place; the accuracy reads the task's mask
    np.testing.assert_array_equal(b["mlm_weights"][0], [0] * 3 + [1] * 5 + [0] * 4)
    np.testing.assert_array_equal(b["accuracy_weights"][0], [0] * 3 + [1] * 4 + [0] * 5)
    masked = tape.tape_batch(s, TASK.input_size, length=12, loss_on="mask")
    np.testing.assert_array_equal(masked["mlm_weights"], masked["accuracy_weights"])
    assert {k: v.shape for k, v in b.items()} == {k: (2, 12) for k in b}


def test_tape_refuses_a_length_shorter_than_its_places_and_unknown_loss_places():
    with pytest.raises(ConfigError, match="length"):
        tape.tape_batch(_sample(n=3), TASK.input_size, length=7)
    with pytest.raises(ConfigError, match="data.task_loss"):
        tape.tape_batch(_sample(n=3), TASK.input_size, loss_on="all")


def test_bucket_length_rounds_up_to_the_multiple_and_stops_at_the_cap():
    assert [tape.bucket_length(t, 16) for t in (1, 16, 17, 33)] == [16, 16, 32, 48]
    assert tape.bucket_length(120, 16, cap=122) == 122
    assert tape.bucket_length(115, 16, cap=122) == 122
    with pytest.raises(ConfigError, match="data.seq_len"):
        tape.bucket_length(123, 16, cap=122)


def test_randomized_positions_are_one_ordered_subset_for_the_whole_batch():
    rng = np.random.default_rng(3)
    pos = tape.tape_positions(rng, 50, 2048)
    assert pos.shape == (50,) and (np.diff(pos) > 0).all() and 0 <= pos[0] and pos[-1] < 2048
    assert pos[-1] > 200  # drawn from the whole range, not 0..49 (fails with p ~ 1e-40)
    b = tape.tape_batch(_sample(n=24, batch=3), TASK.input_size, positions=pos)
    assert (b["positions"] == pos[None]).all()
    assert tape.tape_positions(rng, 50, None) is None
    with pytest.raises(ConfigError, match="randomized_max_length"):
        tape.tape_positions(rng, 50, 40)


def _config(**data):
    d = dict(corpus="algorithmic", task="reverse_with_end", tokenizer="task_symbols",
             batch_size=6, max_input_length=40, bucket_multiple=16, seq_len=96,
             randomized_max_length=None, randomized_eval=False, task_loss="outputs")
    d.update(data)
    return ml_collections.ConfigDict({"data": d, "model": {"output_classes": 3}})


def _iterator(seed=0, rows=None, **data):
    return curriculum.CurriculumIterator(_config(**data), TASK, seed, rows)


def test_curriculum_draws_every_length_in_1_to_40_uniformly():
    it = _iterator()
    counts = collections.Counter(it.input_length(i) for i in range(4000))
    assert sorted(counts) == list(range(1, 41))
    # 100 expected per length; a binomial sd of ~10: 55..145 is 4.5 sd either side
    assert min(counts.values()) > 55 and max(counts.values()) < 145


def test_curriculum_batches_share_one_length_and_come_in_few_bucket_shapes():
    it = _iterator()
    shapes = set()
    for i in range(60):
        n = it.input_length(i)
        b = next(it)
        places = n + TASK.output_length(n)
        assert b["segment_ids"].sum(1).tolist() == [places] * 6
        assert b["input_ids"].shape[1] == tape.bucket_length(places, 16, 96)
        shapes.add(b["input_ids"].shape)
    # tapes of 4..82 places in buckets of 16 up to 96: at most 6 shapes, one compile each
    assert len(shapes) <= 6 and all(s[1] % 16 == 0 for s in shapes)


def test_curriculum_resumes_exactly_and_splits_rows_across_processes():
    it = _iterator(seed=5)
    for _ in range(3):
        next(it)
    state = it.get_state()
    expected = next(it)
    again = _iterator(seed=5)
    again.set_state(state)
    for k, v in next(again).items():
        np.testing.assert_array_equal(v, expected[k])
    part = _iterator(seed=5, rows=(2, 5))
    part.set_state(state)
    for k, v in next(part).items():
        np.testing.assert_array_equal(v, expected[k][2:5])
    other = _iterator(seed=6)
    other.set_state(state)
    assert not np.array_equal(next(other)["input_ids"], expected["input_ids"])
    with pytest.raises(ConfigError, match="algorithmic"):
        again.set_state({"epoch": 1})


def test_curriculum_with_randomized_positions_draws_them_per_batch_below_the_range():
    it = _iterator(randomized_max_length=2048)
    b = next(it)
    real = b["segment_ids"][0] > 0
    pos = b["positions"][:, real]
    assert (pos == pos[0]).all() and (np.diff(pos[0]) > 0).all() and pos.max() < 2048


def test_randomized_layers_give_every_layer_its_own_ordered_subset():
    config = _config(randomized_max_length=2048, randomized_layers=True)
    config.model.num_layers = 3
    it = curriculum.CurriculumIterator(config, TASK, 0)
    b = next(it)
    per = b["layer_positions"]
    rows, length = b["input_ids"].shape
    assert per.shape == (rows, 3, length) and per.dtype == np.int32
    real = b["segment_ids"][0] > 0
    assert (per[:, :, ~real] == 0).all()
    for layer in range(3):
        pos = per[:, layer, real]
        assert (pos == pos[0]).all() and (np.diff(pos[0]) > 0).all() and pos.max() < 2048
    assert not np.array_equal(per[0, 0], per[0, 1]) and not np.array_equal(per[0, 1], per[0, 2])
    # the batch's own positions and everything else are the draws without per-layer ones
    plain = next(curriculum.CurriculumIterator(_config(randomized_max_length=2048), TASK, 0))
    assert "layer_positions" not in plain
    for k in plain:
        assert np.array_equal(plain[k], b[k]), k
