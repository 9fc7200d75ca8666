"""PoSE (Zhu et al., ICLR 2024; posjax.data.pose): the positions equal a direct definition from
the paper's equations (3) and (4) for a fixed seed, are strictly increasing, start at 0 and stay
below the target window; every example draws its own; evaluation and the default keep 0..n-1;
bad fields are one ConfigError line each (exit 2 from train.py); a tiny training runs."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from configs import algorithmic as algorithmic_config
from configs import tiny
from posjax import data
from posjax.data import pipeline, pose
from posjax.data.tasks import mixing
from posjax.errors import ConfigError
from posjax.config.validation import validate
from tests.reliability import runner


def direct(seed: int, n: int, target: int, chunks: int) -> list[int]:
    """The paper's definition, written out: n positions cut into k = min(N, n) chunks of lengths
    l_i (l_0 uniform in 1..ceil(n/2) for two chunks, as the authors' code draws it; for more,
    each l_i uniform in 1..(what is left, less one token per later chunk)); u_0 = 0 and u_i
    uniform in u_{i-1}..L_t-n; chunk i holds u_i + st_i, ..., u_i + st_i + l_i - 1 (eq. 4)."""
    rng = np.random.default_rng(seed)
    k = min(chunks, n)
    if k == 1:
        lengths = [n]
    elif k == 2:
        first = int(rng.integers(1, math.ceil(n / 2) + 1))
        lengths = [first, n - first]
    else:
        lengths = []
        for i in range(k - 1):
            lengths.append(int(rng.integers(1, n - sum(lengths) - (k - 1 - i) + 1)))
        lengths.append(n - sum(lengths))
    u = [0]
    for _ in range(1, k):
        u.append(int(rng.integers(u[-1], target - n + 1)))
    out = []
    for i in range(k):
        st = sum(lengths[:i])
        out += [u[i] + st + j for j in range(lengths[i])]
    return out


CASES = [(0, 32, 64, 2), (1, 32, 64, 2), (2, 128, 4096, 2), (3, 7, 7, 2), (4, 2, 50, 2),
         (5, 32, 64, 3), (6, 100, 1000, 4), (7, 5, 40, 5), (8, 3, 64, 5), (9, 32, 64, 1)]


@pytest.mark.parametrize("seed,n,target,chunks", CASES)
def test_positions_equal_the_direct_definition(seed, n, target, chunks):
    got = pose.pose_positions(np.random.default_rng(seed), n, target, chunks)
    assert got.dtype == np.int32 and got.shape == (n,)
    assert got.tolist() == direct(seed, n, target, chunks)


@pytest.mark.parametrize("chunks", [1, 2, 3, 4])
def test_increasing_from_zero_below_the_window_in_contiguous_chunks(chunks):
    rng = np.random.default_rng(0)
    n, target = 24, 96
    for _ in range(300):
        p = pose.pose_positions(rng, n, target, chunks)
        assert p[0] == 0 and p.max() < target
        assert (np.diff(p) > 0).all()
        jumps = np.flatnonzero(np.diff(p) > 1)
        assert jumps.size <= chunks - 1  # contiguous inside a chunk (a zero skip joins two)
        if chunks == 2 and jumps.size:
            assert jumps[0] + 1 <= math.ceil(n / 2)  # the code's first chunk: at most half


def test_lengths_and_skips_cover_their_whole_ranges():
    # Two chunks of an 8-token example in a 20-position window: the first chunk's length takes
    # every value in 1..4, the skip every value in 0..12, so the last position reaches 19.
    rng = np.random.default_rng(1)
    firsts, skips = set(), set()
    for _ in range(2000):
        lengths = pose.chunk_lengths(rng, 8, 2)
        firsts.add(int(lengths[0]))
        skips.add(int(pose.skip_biases(rng, 8, 20, 2)[1]))
    assert firsts == set(range(1, 5)) and skips == set(range(0, 13))
    u = pose.skip_biases(np.random.default_rng(2), 8, 20, 6)
    assert u[0] == 0 and (np.diff(u) >= 0).all() and u[-1] <= 12  # non-decreasing, u_0 = 0


def test_deterministic_given_the_seed_and_different_across_seeds():
    a = pose.pose_positions(np.random.default_rng(5), 64, 1024, 2)
    np.testing.assert_array_equal(a, pose.pose_positions(np.random.default_rng(5), 64, 1024, 2))
    others = {pose.pose_positions(np.random.default_rng(s), 64, 1024, 2).tobytes()
              for s in range(6, 12)}
    assert a.tobytes() not in others and len(others) > 1


def test_an_example_longer_than_the_window_is_refused():
    with pytest.raises(ConfigError, match="data.pose_target_length"):
        pose.pose_positions(np.random.default_rng(0), 65, 64, 2)


# -- the pipeline ------------------------------------------------------------------------------
def _segments(batch):
    for row, seg in zip(batch["positions"], batch["segment_ids"]):
        for s in range(1, seg.max() + 1):
            yield row[seg == s]


def test_training_rows_draw_their_own_positions_and_keep_their_tokens(make_config, chars):
    plain = next(data.make_train_iterator(make_config(), chars, seed=0))
    config = make_config(pose_target_length=256, pose_chunks=2)
    batch = next(data.make_train_iterator(config, chars, seed=0))
    for key in plain:  # PoSE draws after the masks: ids, masks and segments are unchanged
        if key != "positions":
            np.testing.assert_array_equal(batch[key], plain[key], err_msg=key)
    for p in _segments(batch):
        assert p[0] == 0 and (np.diff(p) > 0).all() and p.max() < 256
    assert len({row.tobytes() for row in batch["positions"]}) == batch["positions"].shape[0]
    assert batch["positions"].max() >= 64  # past the training length
    again = next(data.make_train_iterator(config, chars, seed=0))
    np.testing.assert_array_equal(again["positions"], batch["positions"])
    other = next(data.make_train_iterator(config, chars, seed=1))
    assert not np.array_equal(other["positions"], batch["positions"])


def test_off_by_default_and_at_evaluation(make_config, chars):
    default = next(data.make_train_iterator(make_config(), chars, seed=0))
    off = next(data.make_train_iterator(make_config(pose_target_length=0), chars, seed=0))
    for key in default:
        np.testing.assert_array_equal(off[key], default[key], err_msg=key)
    for p in _segments(off):
        assert p.tolist() == list(range(p.size))
    config = make_config(pose_target_length=256)
    for p in _segments(data.make_eval_batches(config, chars, 1)[0]):
        assert p.tolist() == list(range(p.size))


def test_task_rows_are_one_example(make_config, chars):
    config = make_config(seq_len=32, tasks={"passkey": 1.0})
    tokens = pipeline.tokenized(config, chars, "train").tokens
    mix = mixing.make_mixer(config, chars, tokens, seed=3, pose_target_length=128)
    for i in range(20):
        p = mix(i)["positions"]
        assert p[0] == 0 and (np.diff(p) > 0).all() and p.max() < 128


# -- config checks -----------------------------------------------------------------------------
def _tiny(scheme="rope", **data_fields):
    config = tiny.get_config(scheme)  # seq_len 32, model.max_length 64
    with config.unlocked():
        for key, value in data_fields.items():
            config.data[key] = value
    return config


def test_a_good_config_validates():
    validate(_tiny(pose_target_length=64, pose_chunks=3))
    validate(_tiny("learned", pose_target_length=64))  # the table's 64 rows hold every position
    validate(_tiny(pose_target_length=0, randomized_max_length=64))  # off beside randomized


BAD = [
    (dict(pose_target_length=32), "data.pose_target_length", "data.seq_len=32"),
    (dict(pose_target_length=16), "data.pose_target_length", "data.seq_len=32"),
    (dict(pose_target_length=-1), "data.pose_target_length", "0 (off)"),
    (dict(pose_target_length=64, pose_chunks=0), "data.pose_chunks", "an int in [1"),
    (dict(pose_target_length=64, pose_chunks=33), "data.pose_chunks", "data.seq_len=32"),
    (dict(pose_target_length=64, randomized_max_length=64), "data.pose_target_length",
     "data.randomized_max_length=64"),
    (dict(pose_target_length=64, randomized_layers=True), "data.randomized_layers",
     "data.pose_target_length=64"),
]


@pytest.mark.parametrize("fields,field,says", BAD, ids=[str(b[0]) for b in BAD])
def test_bad_fields_are_one_line_each(fields, field, says):
    with pytest.raises(ConfigError) as e:
        validate(_tiny(**fields))
    assert e.value.field == field and says in str(e.value) and "\n" not in str(e.value)


def test_a_table_too_short_for_the_window_is_refused_before_training():
    with pytest.raises(ConfigError) as e:
        validate(_tiny("learned", pose_target_length=128))  # 64 rows
    assert e.value.field == "data.pose_target_length" and "position.rows=64" in str(e.value)


def test_patch_images_refuse_it():
    with pytest.raises(ConfigError) as e:
        validate(_tiny("rope2d", pose_target_length=64))  # rope2d trains on patch images
    assert e.value.field == "data.pose_target_length" and "patches" in str(e.value)


def test_the_algorithmic_corpus_refuses_it():
    config = algorithmic_config.get_config("reverse_string,rope")
    with config.unlocked():
        config.data.pose_target_length = 4 * config.data.seq_len
    with pytest.raises(ConfigError) as e:
        validate(config)
    assert e.value.field == "data.pose_target_length" and "algorithmic" in str(e.value)


@pytest.mark.slow
@pytest.mark.parametrize("args,field", [
    (["--config.data.pose_target_length=32"], "data.pose_target_length"),
    (["--config.data.pose_target_length=64", "--config.data.pose_chunks=0"], "data.pose_chunks"),
    (["--config.data.pose_target_length=64", "--config.data.pose_chunks=40"], "data.pose_chunks"),
    (["--config.data.pose_target_length=64", "--config.data.randomized_max_length=64"],
     "data.pose_target_length"),
])
def test_train_py_exits_2_with_one_line(tmp_path, args, field):
    wd = tmp_path / "wd"
    r = subprocess.run([sys.executable, "train.py", "--config=configs/tiny.py:rope", *args,
                        f"--workdir={wd}"], cwd=runner.REPO, env=runner.make_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"train.py: error: {field}="), r.stderr
    assert not wd.exists()  # refused before the workdir is touched


@pytest.mark.slow
def test_a_tiny_training_runs_with_finite_loss(tmp_path):
    from posjax.training import train_and_evaluate

    config = _tiny(pose_target_length=64)
    with config.unlocked():
        config.train.steps, config.train.eval_every, config.train.checkpoint_every = 4, 0, 4
    summary = train_and_evaluate(config, os.fspath(tmp_path / "run"), progress_bar=False)
    assert summary["step"] == 4
    assert math.isfinite(summary["first_loss"]) and math.isfinite(summary["last_loss"])
