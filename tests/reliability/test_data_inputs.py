"""Bad data through train.py, end to end: what the user sees.

- a text_dir holding a non-UTF-8 file          -> exit 2, one line naming the file
- a text_dir holding only empty files           -> exit 2, one line naming data.path
- empty files + documents shorter than seq_len  -> empty files skipped (warning), short
                                                   documents packed together; training runs
- vocab.txt edited after a run (other size, or same size with other tokens)
                                                -> exit 2, one line naming vocab.txt
"""

import os
import shutil

import pytest

from tests.reliability import runner

# Slow tier: whole train.py / eval.py runs in subprocesses.
pytestmark = pytest.mark.slow

ARGS = ["--config=configs/base.py:tiny", "--config.data.corpus=text_dir",
        "--config.train.steps=2", "--config.train.warmup_steps=1", "--config.train.eval_every=0",
        "--config.train.checkpoint_every=2", "--progress_bar=false"]
SENTENCES = ["人民日报社论指出，改革开放是决定当代中国命运的关键一招。",
             "今天北京天气晴朗，气温零下三度。", "春节前夕，各地群众忙着置办年货。",
             "科学技术是第一生产力。"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return runner.make_env()


def _corpus(root, n_short=40):
    """Short documents (each well under seq_len=32 characters), one empty file, one blank."""
    os.makedirs(root, exist_ok=True)
    for i in range(n_short):
        with open(os.path.join(root, f"doc{i:03d}.txt"), "w", encoding="utf-8") as f:
            f.write(SENTENCES[i % len(SENTENCES)][: 8 + i % 12] + "\n")
    open(os.path.join(root, "empty.txt"), "w").close()
    with open(os.path.join(root, "blank.txt"), "w") as f:
        f.write("  \n\n")
    return root


def _train(env, corpus, wd, *extra):
    return runner.run(ARGS + [f"--config.data.path={corpus}", f"--workdir={wd}", *extra], env)


def _one_error_line(code, text):
    assert code == 2, text
    errors = [line for line in text.splitlines() if line.startswith("train.py: error:")]
    assert len(errors) == 1 and "Traceback" not in text, text
    return errors[0]


def test_non_utf8_file_is_named(tmp_path, env):
    corpus = _corpus(str(tmp_path / "corpus"), n_short=4)
    bad = os.path.join(corpus, "gbk.txt")
    with open(bad, "wb") as f:
        f.write("中文".encode("gbk"))
    line = _one_error_line(*_train(env, corpus, tmp_path / "wd"))
    assert f"data.path='{bad}'" in line and "UTF-8" in line, line


def test_only_empty_files(tmp_path, env):
    corpus = str(tmp_path / "corpus")
    os.makedirs(corpus)
    open(os.path.join(corpus, "a.txt"), "w").close()
    line = _one_error_line(*_train(env, corpus, tmp_path / "wd"))
    assert line.startswith(f"train.py: error: data.path='{corpus}'") and "non-empty" in line, line


def test_short_documents_train_and_vocab_mismatch_is_refused(tmp_path, env):
    corpus = _corpus(str(tmp_path / "corpus"))
    wd = str(tmp_path / "wd")
    code, text = _train(env, corpus, wd)
    assert code == 0, text
    assert "skipping empty file" in text and "empty.txt" in text, text
    assert "done: step 2" in text

    vocab = os.path.join(wd, "vocab.txt")
    with open(vocab, encoding="utf-8") as f:
        tokens = f.read().splitlines()
    shutil.copy(vocab, vocab + ".orig")

    # same size, two tokens swapped: ids would silently mean other characters
    swapped = tokens[:5] + [tokens[6], tokens[5]] + tokens[7:]
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(swapped) + "\n")
    line = _one_error_line(*_train(env, corpus, wd, "--config.train.steps=4"))
    assert line.startswith("train.py: error: vocab.txt=") and "fingerprint" in line, line

    # fewer tokens
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens[:-3]) + "\n")
    line = _one_error_line(*_train(env, corpus, wd, "--config.train.steps=4"))
    assert f"vocab.txt='{len(tokens) - 3} tokens'" in line and f"{len(tokens)} tokens" in line, line

    shutil.copy(vocab + ".orig", vocab)  # restored: resumes
    code, text = _train(env, corpus, wd, "--config.train.steps=3")
    assert code == 0 and "resuming from step 2" in text, text
