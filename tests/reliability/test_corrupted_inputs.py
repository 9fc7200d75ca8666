"""Damaged files in an existing workdir, and a text corpus holding what is not text.

Every case gets one clear line: a ConfigError (train.py: exit 2) naming the file, or a warning
and a normal run where posjax can recover (a damaged latest checkpoint: the one before is used;
a damaged metrics.jsonl: kept, appended to). And nothing already written is lost: every file
of the workdir is still there byte for byte (a bad checkpoint is moved aside, not deleted; a
metrics.jsonl cut mid-line only gets its newline).

In-process (posjax.training.train_and_evaluate): one real 2-step run builds the workdir; every
case then resumes a copy with train.steps at a checkpoint's step, so it restores and stops
('nothing to do') without compiling. train.py's exit code for a ConfigError is covered by
test_data_inputs / test_validation.
"""

import hashlib
import json
import os
import shutil

import pytest

from configs import base
from posjax.errors import ConfigError
from posjax.training import train_and_evaluate

# Slow tier: whole train.py / eval.py runs in subprocesses.
pytestmark = pytest.mark.slow

GARBAGE = bytes(range(256)) * 4  # not UTF-8, not JSON, NUL bytes


def _config(steps=2, corpus=None):
    c = base.get_config("tiny")
    c.train.steps, c.train.warmup_steps, c.train.log_every = steps, min(1, steps - 1), 1
    c.train.eval_every, c.train.checkpoint_every, c.train.keep_checkpoints = 0, 1, 3
    if corpus is not None:
        c.data.corpus, c.data.path = "text_dir", corpus
    return c


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    wd = str(tmp_path_factory.mktemp("good") / "wd")
    summary = train_and_evaluate(_config(), wd, progress_bar=False)
    assert summary["step"] == 2
    return wd


def _files(wd):
    """relative path -> sha256 of every file under wd."""
    out = {}
    for root, _, names in os.walk(wd):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, wd)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _copy(good, tmp_path):
    wd = str(tmp_path / "wd")
    shutil.copytree(good, wd)
    return wd


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(max(os.path.getsize(path) // 2, 1))


def _garble(path):
    with open(path, "wb") as f:
        f.write(GARBAGE)


def _one_line(e):
    msg = str(e)
    assert "\n" not in msg and len(msg) < 600, msg
    return msg


@pytest.mark.parametrize("name,damage,expected", [
    ("vocab.txt", _truncate, "vocab.txt="),
    ("vocab.txt", _garble, "vocab.txt="),
    ("config.json", _truncate, "config.json="),
    ("config.json", _garble, "config.json="),
    ("vocab.fingerprint", _garble, "vocab.fingerprint="),
])
def test_damaged_workdir_file_is_one_error_and_nothing_changes(good, tmp_path, name, damage,
                                                                 expected):
    wd = _copy(good, tmp_path)
    damage(os.path.join(wd, name))
    before = _files(wd)
    with pytest.raises(ConfigError) as e:
        train_and_evaluate(_config(), wd, progress_bar=False)
    msg = _one_line(e.value)
    assert msg.startswith(expected) and os.path.join(wd, name) in msg, msg
    assert _files(wd) == before  # nothing written, nothing moved


@pytest.mark.parametrize("damage", ["truncated", "garbled"])
def test_damaged_metrics_is_kept_with_a_warning(good, tmp_path, capsys, damage):
    wd = _copy(good, tmp_path)
    path = os.path.join(wd, "metrics.jsonl")
    with open(path, "rb") as f:
        original = f.read()
    if damage == "truncated":  # a kill in the middle of writing the last line
        cut = original[: len(original) - 20]
        with open(path, "wb") as f:
            f.write(cut)
    else:  # junk between good lines
        cut = original + GARBAGE + b"\n" + original
        with open(path, "wb") as f:
            f.write(cut)
    before = _files(wd)
    summary = train_and_evaluate(_config(), wd, progress_bar=False)
    assert summary["step"] == 2  # resumed from the checkpoint: nothing to do
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "metrics.jsonl" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {path}: "), err
    assert "not valid JSON" in warnings[0], warnings
    with open(path, "rb") as f:
        after = f.read()
    assert after.startswith(cut) and after[len(cut):] in (b"", b"\n")  # kept byte for byte
    assert after.endswith(b"\n")  # the next line appended starts on a line of its own
    after = _files(wd)  # every other file as it was (a resumed run may add TensorBoard files)
    assert all(after.get(k) == v for k, v in before.items() if k != "metrics.jsonl")


def _largest_state_file(step_dir):
    files = [os.path.join(r, n) for r, _, ns in os.walk(os.path.join(step_dir, "state"))
             for n in ns]
    return max(files, key=os.path.getsize)


@pytest.mark.parametrize("damage", ["truncated", "garbled_metadata"])
def test_damaged_latest_checkpoint_falls_back_keeping_everything(good, tmp_path, capsys, damage):
    wd = _copy(good, tmp_path)
    latest = os.path.join(wd, "checkpoints", "2")
    if damage == "truncated":
        _truncate(_largest_state_file(latest))
    else:
        _garble(os.path.join(latest, "_CHECKPOINT_METADATA"))
    before = _files(wd)
    summary = train_and_evaluate(_config(steps=1), wd, progress_bar=False)
    assert summary["start_step"] == 1  # the checkpoint before it
    out = capsys.readouterr()
    warnings = [line for line in out.err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"checkpoint {latest} is unusable" in warnings[0], out.err
    assert "moved to" in warnings[0] and "Traceback" not in out.err, out.err
    after = _files(wd)
    # checkpoint 1, vocab, metrics: untouched; checkpoint 2: moved aside, same bytes
    # (config.json is rewritten: it records this invocation's train.steps=1)
    kept = {k: v for k, v in before.items()
            if not k.startswith(os.path.join("checkpoints", "2")) and k != "config.json"}
    assert {k: after.get(k) for k in kept} == kept
    moved = sorted(v for k, v in after.items() if k.startswith("checkpoints.corrupt"))
    assert moved == sorted(v for k, v in before.items()
                           if k.startswith(os.path.join("checkpoints", "2")))


def test_every_checkpoint_damaged_is_one_error(good, tmp_path):
    wd = _copy(good, tmp_path)
    for step in ("1", "2"):
        _garble(os.path.join(wd, "checkpoints", step, "_CHECKPOINT_METADATA"))
    with pytest.raises(ConfigError) as e:
        train_and_evaluate(_config(), wd, progress_bar=False)
    msg = _one_line(e.value)
    assert msg.startswith("checkpoint=") and os.path.join(wd, "checkpoints") in msg, msg
    assert len(os.listdir(os.path.join(wd, "checkpoints.corrupt"))) == 2  # set aside, kept


@pytest.mark.parametrize("bad,content,expected", [
    ("image.txt", b"\x89PNG\r\n\x1a\n" + GARBAGE, "UTF-8 text files only (byte 0 is not UTF-8)"),
    ("zeros.txt", b"\x00" * 64 + b"abc", "text files only (it holds NUL bytes"),
    ("latin1.txt", "café crème".encode("latin-1"), "UTF-8 text files only (byte 3 is not UTF-8)"),
])
def test_corpus_with_binary_or_non_utf8_file_is_named(tmp_path, bad, content, expected):
    corpus = str(tmp_path / "corpus")
    os.makedirs(corpus)
    with open(os.path.join(corpus, "good.txt"), "w", encoding="utf-8") as f:
        f.write("some ordinary words here\n" * 20)
    open(os.path.join(corpus, "empty.txt"), "w").close()
    with open(os.path.join(corpus, bad), "wb") as f:
        f.write(content)
    with pytest.raises(ConfigError) as e:
        train_and_evaluate(_config(corpus=corpus), str(tmp_path / "wd"), progress_bar=False)
    msg = _one_line(e.value)
    assert msg.startswith(f"data.path='{os.path.join(corpus, bad)}'") and expected in msg, msg


def test_corpus_empty_files_are_skipped_with_a_warning(tmp_path, caplog):
    from posjax.data import corpora

    corpus = str(tmp_path / "corpus")
    os.makedirs(corpus)
    with open(os.path.join(corpus, "good.txt"), "w", encoding="utf-8") as f:
        f.write("some ordinary words\n")
    for n in ("empty.txt", "blank.txt"):
        with open(os.path.join(corpus, n), "w") as f:
            f.write("" if n == "empty.txt" else " \n\t\n")
    with caplog.at_level("WARNING"):
        docs = corpora.read_text_dir(corpus)
    assert docs == [["some", "ordinary", "words"]]
    skipped = [r.getMessage() for r in caplog.records if "skipping empty file" in r.getMessage()]
    assert len(skipped) == 2, skipped
    json.dumps(docs)  # plain data
