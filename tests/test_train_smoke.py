"""End-to-end smoke tests of train.py on CPU with the real embedded corpus.

Every run is a subprocess (so XLA_FLAGS for 8 simulated devices never leaks into other tests)
and shares one persistent compilation cache, so a run that repeats a compiled step is cheap.
"""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.reliability import runner

# Slow tier: whole train.py / eval.py runs in subprocesses.
pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Tiny model, but batch 16 so a log window holds ~80 scored tokens and the loss trend is clear.
TINY = [
    "--config=configs/nezha.py:tiny",  # the project's main job, at test size
    "--config.data.batch_size=16",
    "--config.train.steps=30",
    "--config.train.learning_rate=1e-2",
    "--config.train.warmup_steps=3",
    "--config.train.log_every=5",
    "--config.train.eval_every=30",
    "--config.train.checkpoint_every=10",
    "--config.train.keep_checkpoints=3",
]


@pytest.fixture(scope="module")
def env():
    return runner.make_env()


def _run(args, env, timeout=300):
    return subprocess.run([sys.executable, "train.py", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _losses(stdout):
    return {int(s): float(l) for s, l in re.findall(r"^step (\d+) \| loss ([0-9.]+)", stdout, re.M)}


def test_train_loss_falls_checkpoints_and_resume_sees_the_same_data(tmp_path, env):
    # train.py as a user starts it: with the huge-page re-exec the other tests skip
    # (tests/conftest.py)
    env = {k: v for k, v in env.items() if k != "POSJAX_HUGE_PAGES"}
    wd = str(tmp_path / "run")
    first = _run(TINY + [f"--workdir={wd}"], env)
    assert first.returncode == 0, first.stderr[-3000:]
    losses = _losses(first.stdout)
    assert sorted(losses) == [5, 10, 15, 20, 25, 30], first.stdout
    assert losses[30] < losses[5] - 0.05, losses  # loss visibly falls on real text
    assert "eval step 30" in first.stdout
    for name in ("config.json", "vocab.txt", "tb"):
        assert os.path.exists(os.path.join(wd, name)), name
    ckpts = os.path.join(wd, "checkpoints")
    assert sorted(int(s) for s in os.listdir(ckpts)) == [10, 20, 30]
    assert re.search(r"^mean loss [0-9.]+ \(steps 1-5\) -> [0-9.]+ \(steps 26-30\); wall",
                     first.stdout, re.M), first.stdout

    # A run killed after the step-20 save: drop checkpoint 30 and run again. It must resume at
    # 20 and, with the data iterator and dropout keys restored, log the same losses.
    shutil.rmtree(os.path.join(ckpts, "30"))
    second = _run(TINY + [f"--workdir={wd}"], env)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming from step 20" in second.stdout
    resumed = _losses(second.stdout)
    assert sorted(resumed) == [25, 30]
    # the closing line says which steps its two windows hold (this run began at 21)
    assert re.search(r"^mean loss [0-9.]+ \(steps 21-25\) -> [0-9.]+ \(steps 26-30\); wall",
                     second.stdout, re.M), second.stdout
    for s in (25, 30):
        assert resumed[s] == pytest.approx(losses[s], rel=1e-4, abs=1e-4), (s, resumed, losses)
    assert sorted(int(s) for s in os.listdir(ckpts)) == [10, 20, 30]


@pytest.mark.parametrize("args,field", [
    (["--config=configs/base.py:nope"], "config variant"),
    # a config file that does not exist: the nearest ones, not ml_collections' load failure
    (["--config=configs/nezah.py"], "--config=configs/nezah.py is not allowed: an existing "
     "config file (no such file; nearest: configs/nezha.py"),
    # a few steps of a config whose warm-up is longer: the error names both fields
    (["--config=configs/nezha.py:base", "--config.train.steps=5"],
     "train.warmup_steps=10000 is not allowed: an int in [0, train.steps=5)"),
    (["--config=configs/base.py:tiny", "--workdir={blocker}/run"], "workdir"),
    (["--config=configs/base.py:tiny", "--config.data.seq_len=100", "--config.model.max_length=64"],
     "data.seq_len"),
    # layer layouts (issue 18): a window of 0, one wider than the training length, a pattern
    # with no global layer (2 layers, global every 3rd counted from the end)
    (["--config=configs/base.py:tiny", "--config.model.local_window=0"], "model.local_window"),
    (["--config=configs/base.py:tiny", "--config.model.local_window=4096"], "model.local_window"),
    (["--config=configs/base.py:tiny", "--config.model.local_window=8",
      "--config.model.global_every=3", "--config.model.global_first=False"],
     "model.global_every"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, env, args, field):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    args = [a.format(blocker=blocker) for a in args]
    if not any(a.startswith("--workdir") for a in args):
        args.append(f"--workdir={tmp_path / 'wd'}")
    r = _run(args, env, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "wd" / "checkpoints")


EIGHT_DEVICES = textwrap.dedent("""
    import sys, jax
    assert jax.device_count() == 8, jax.devices()
    from configs import base
    from posjax.training import train_and_evaluate
    from posjax.training.loop import NonFiniteLoss

    def config(policy):
        c = base.get_config("tiny")
        c.mesh.data, c.mesh.fsdp, c.mesh.tensor = 2, 2, 2
        c.model.num_layers = 1  # compile time: the mesh and policies need no second layer
        c.data.batch_size = 8
        c.train.steps, c.train.warmup_steps, c.train.log_every = 4, 1, 1
        c.train.eval_every, c.train.checkpoint_every = 0, 2
        # lr 0 at step 1, then a huge step: step 3's forward overflows (a real non-finite loss)
        c.train.learning_rate = 1e30
        c.train.nan_policy = policy
        return c

    # 'stop': steps 1-2 fine (checkpoint at 2), step 3 overflows -> stop, nothing saved after 2
    try:
        train_and_evaluate(config("stop"), sys.argv[1], progress_bar=False)
    except NonFiniteLoss as e:
        print("STOPPED:", e, flush=True)
    else:
        raise AssertionError("nan_policy='stop' did not stop")
    # same workdir with 'skip' (not a pinned field): restores the sharded state at step 2, skips
    s = train_and_evaluate(config("skip"), sys.argv[1], progress_bar=False)
    assert s["start_step"] == 2 and s["step"] == 4, s
""")


def test_eight_simulated_devices_2x2x2_mesh_and_nan_policies(tmp_path, env):
    e = dict(env, XLA_FLAGS=runner.xla_flags(8))
    r = subprocess.run([sys.executable, "-c", EIGHT_DEVICES, str(tmp_path)], cwd=REPO, env=e,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "mesh data=2 x fsdp=2 x tensor=2" in r.stdout
    assert re.search(r"step 3: non-finite loss/gradient, update skipped", r.stdout), r.stdout
    assert re.search(r"STOPPED: loss or gradient is not finite at step 3 .*last good checkpoint: "
                     r"step 2", r.stdout), r.stdout
    assert "resuming from step 2" in r.stdout
    assert re.search(r"step 4: non-finite loss/gradient, update skipped \(2 skipped", r.stdout)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["2", "4"]
