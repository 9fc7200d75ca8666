"""The masked-patch model end to end: train.py trains rope2d (mixed) on the synthetic patch
images at a 4 x 4 grid and the loss falls; eval.py evaluates it at 8 x 8 as well and writes its
usual results; a 2-D scheme on text, a 1-D scheme given (row, column) positions, an unknown
mode, a sliding window on a 2-D scheme and an eval length that is no grid * grid are one line
and exit 2. Subprocesses, sharing the session's compilation cache."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.reliability import runner

# Slow tier: whole train.py / eval.py runs in subprocesses.
pytestmark = pytest.mark.slow

REPO = runner.REPO
ARGS = ["--config=configs/rope2d.py:tiny", "--config.position.mode=mixed",
        "--config.data.batch_size=16", "--config.train.steps=20",
        "--config.train.learning_rate=1e-2", "--config.train.warmup_steps=2",
        "--config.train.log_every=5", "--config.train.eval_every=0",
        "--config.train.checkpoint_every=20", "--progress_bar=false"]


@pytest.fixture(scope="module")
def env():
    return runner.make_env()


def _py(script, args, env, timeout=300):
    return subprocess.run([sys.executable, script, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_train_then_evaluate_at_a_larger_grid(tmp_path, env):
    wd, out = str(tmp_path / "run"), str(tmp_path / "eval")
    trained = _py("train.py", ARGS + [f"--workdir={wd}"], env)
    assert trained.returncode == 0, trained.stderr[-3000:]
    losses = {int(s): float(v) for s, v in
              re.findall(r"^step (\d+) \| loss ([0-9.]+)", trained.stdout, re.M)}
    assert sorted(losses) == [5, 10, 15, 20], trained.stdout
    assert losses[20] < losses[5] - 0.1, losses  # from ~ln(21 codes) towards the image prior

    evaluated = _py("eval.py", [f"--workdir={wd}", f"--out={out}", "--lengths=16,64",
                                "--methods=as_is,truncate", "--masked_tokens=100",
                                "--progress_bar=false"], env)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    with open(os.path.join(out, "results.json")) as f:
        cells = list(json.load(f)["cells"].values())
    ok = {(c["label"], c["length"]) for c in cells if c["status"] == "ok"}
    assert ok == {("as_is", 16), ("as_is", 64), ("as_is shuffled", 16)}, ok
    truncate = [c for c in cells if c["method"] == "truncate"]
    assert truncate and all(c["status"] == "not_applicable" and "(row, column)" in c["reason"]
                            for c in truncate)
    at_64 = next(c for c in cells if c["label"] == "as_is" and c["length"] == 64)
    assert at_64["overall"]["count"] >= 100 and 0 <= at_64["overall"]["accuracy"] <= 1
    for name in ("results.csv", "results.md", "accuracy_vs_length.png"):
        assert os.path.getsize(os.path.join(out, name)) > 0
    with open(os.path.join(out, "results.md")) as f:
        md = f.read()
    assert "Image runs" in md and "| method | 4 x 4 | 8 x 8 |" in md  # grids, not tokens

    # a length that is no grid * grid: one line, exit 2, nothing written
    bad = str(tmp_path / "bad")
    refused = _py("eval.py", [f"--workdir={wd}", f"--out={bad}", "--lengths=16,50",
                              "--progress_bar=false"], env, timeout=120)
    assert refused.returncode == 2, (refused.stdout[-1000:], refused.stderr[-2000:])
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "lengths=50" in lines[0] and "square grid" in lines[0], lines
    assert not os.path.exists(bad)


GRID_FOR_ROPE = textwrap.dedent("""
    from configs import rope2d

    def get_config(arg=None):
        config = rope2d.get_config("tiny")
        config.position = {"name": "rope"}
        config.data.patches.positions = "grid"
        return config
""")


@pytest.mark.parametrize("case,words", [
    ("2d_on_text", ["data.corpus='peoples_daily'", "2-D position 'rope2d'"]),
    ("1d_given_grid", ["data.patches.positions='grid'", "'rope' takes 1-D positions"]),
    ("unknown_mode", ["position.mode='diagonal'", "axial, mixed"]),
    ("window_for_2d", ["model.local_window=4", "2-D position 'rope2d'"]),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, env, case, words):
    wd = str(tmp_path / "run")
    if case == "2d_on_text":
        args = ["--config=configs/tiny.py:rope", "--config.position.name=rope2d"]
    elif case == "1d_given_grid":
        path = tmp_path / "grid_rope.py"
        path.write_text(GRID_FOR_ROPE)
        args = [f"--config={path}"]
    elif case == "window_for_2d":  # once refused only at the first step, workdir written
        args = ["--config=configs/rope2d.py:tiny", "--config.model.local_window=4",
                "--config.model.global_every=2"]
    else:
        args = ["--config=configs/rope2d.py:tiny", "--config.position.mode=diagonal"]
    result = _py("train.py", args + [f"--workdir={wd}"], env, timeout=120)
    assert result.returncode == 2, (result.stdout[-1000:], result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert not os.path.exists(wd)  # nothing written
