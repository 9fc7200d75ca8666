"""Preemption: SIGTERM / SIGINT / kill -9 at different moments (start-up, between steps, mid-save), then resume; the result must be
bitwise the uninterrupted run (CPU float32: same per-step losses, same final parameters,
optimizer state, RNG, step and data position). Also a damaged latest checkpoint and a
checkpoint directory deleted under a running job.

One uninterrupted reference run (module fixture) runs concurrently with the interrupted chain;
every run shares one compilation cache, so only the first ones compile.
"""

import os
import re
import shutil
import signal
import threading

import pytest

from tests.reliability import chaos
from tests.reliability import runner
from tests.reliability.runner import ARGS, STEPS

# Slow tier: whole train.py / eval.py runs in subprocesses.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return runner.make_env()


@pytest.fixture(scope="module")
def reference(tmp_path_factory, env):
    """The uninterrupted run, started at once (it runs while the interrupted ones do)."""
    wd = str(tmp_path_factory.mktemp("reference") / "run")
    r = runner.Run(ARGS + [f"--workdir={wd}"], env)
    done = {}

    def result() -> str:
        if not done:
            assert r.watch([]) == 0, r.text[-3000:]
            done["wd"] = wd
        return done["wd"]

    yield result
    if r.proc.poll() is None:
        r.proc.kill()


def _compare_with_reference(wd: str, ref: str) -> None:
    """Every loss the interrupted runs logged equals the reference's, bit for bit, and the
    final checkpoints (params, optimizer, rng, step, skipped, data position) are identical."""
    ref_losses = runner.step_losses(ref)
    assert sorted(ref_losses) == list(range(1, STEPS + 1))
    got = runner.step_losses(wd)
    assert sorted(got) == list(range(1, STEPS + 1)), sorted(got)
    for step, values in got.items():
        # A step re-run after a kill was logged twice: both times it must equal the reference.
        assert all(v == ref_losses[step][0] for v in values), (step, values, ref_losses[step])
    ref_state, ref_data = runner.load_checkpoint(ref, STEPS)
    state, data = runner.load_checkpoint(wd, STEPS)
    assert data == ref_data
    runner.assert_trees_equal(state, ref_state)


STOPPED = re.compile(r"^(SIGTERM|SIGINT): stopped after step (\d+); checkpoint of step \2 "
                     r"saved in (.+)$", re.M)


def _graceful(wd, env, trigger, sig):
    """One run stopped by `sig` after the line `trigger`: exit 0, says where it saved what."""
    r = runner.Run(ARGS + [f"--workdir={wd}"], env)
    assert r.watch([(trigger, lambda r: r.signal(sig))]) == 0, r.text
    m = STOPPED.search(r.text)
    assert m and m.group(1) == signal.Signals(sig).name, r.text
    assert m.group(3) == os.path.join(wd, "checkpoints"), r.text
    step = int(m.group(2))
    assert step < STEPS and runner.checkpoint_steps(wd)[-1] == step, runner.checkpoint_steps(wd)
    return step


def _delete_checkpoints(wd):
    """What `rm -rf <workdir>/checkpoints` does to the running job: the path is gone at once
    (renamed away first, so removing it cannot race with files being written into it)."""
    path = os.path.join(wd, "checkpoints")
    os.rename(path, path + ".deleted")
    shutil.rmtree(path + ".deleted", ignore_errors=True)


def chain_a(wd, env):
    """SIGTERM between steps; SIGINT mid-save; then a run whose checkpoints/ is deleted."""
    s1 = _graceful(wd, env, runner.after_step(2), signal.SIGTERM)
    s2 = _graceful(wd, env, runner.saving, signal.SIGINT)
    assert 2 <= s1 < s2
    r = runner.Run(ARGS + [f"--workdir={wd}"], env)
    code = r.watch([(runner.after_step(s2 + 2), lambda _: _delete_checkpoints(wd))])
    assert code == 0, r.text
    assert f"resuming from step {s2}" in r.text
    # a warning line (the directory vanished, or the save in flight failed: orbax also logs
    # its own traceback for that one), then the run goes on, saves again and ends normally
    assert re.search(r"^warning: (checkpoint directory .* disappeared during the run|saving .* "
                     r"failed .*; training continues)", r.text, re.M), r.text
    assert f"done: step {STEPS}" in r.text, r.text


def _startup_sigterm(wd, env):
    """SIGTERM as soon as train.py's handler is installed (before JAX, data and restore):
    exit 0 with one 'stopped during start-up' line, no traceback, nothing saved."""
    kill = chaos.Kill(signal.SIGTERM, "start-up", 0.0)
    code, text = chaos.kill_run(ARGS + [f"--workdir={wd}"], env, kill,
                                os.path.join(wd, "checkpoints"), timeout=600)
    assert code == 0 and "Traceback" not in text, text
    assert kill.hit.startswith("start-up"), (kill.hit, text)
    assert "SIGTERM: stopped during start-up, before training began" in text, text
    assert not runner.checkpoint_steps(wd)


def chain_b(wd, env):
    """SIGTERM during start-up; two SIGTERMs during a save (the second exits at once); kill -9
    during a save; then the two newest checkpoints damaged (one truncated file, one empty
    directory) before resuming."""
    def term(r):
        r.signal(signal.SIGTERM)
    _startup_sigterm(wd, env)
    r = runner.Run(ARGS + [f"--workdir={wd}"], env)
    code = r.watch([(runner.saving_at_least(4), term),
                    (lambda line: line.startswith("SIGTERM: finishing"), term)])
    assert code == 128 + signal.SIGTERM, r.text
    assert "second SIGTERM: exiting now without saving" in r.text
    r = runner.Run(ARGS + [f"--workdir={wd}"], env)
    assert r.watch([(runner.saving, lambda r: r.signal(signal.SIGKILL))]) == -signal.SIGKILL, r.text
    assert re.search(r"resuming from step [3-9]", r.text), r.text  # checkpoint 3+ survived

    steps = runner.checkpoint_steps(wd)
    assert len(steps) == 3, steps  # keep_checkpoints=3
    latest = os.path.join(wd, "checkpoints", str(steps[-1]), "state")
    victim = max((os.path.join(root, n) for root, _, names in os.walk(latest) for n in names),
                 key=os.path.getsize)
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) // 2)
    empty = os.path.join(wd, "checkpoints", str(steps[-2]))
    shutil.rmtree(empty)
    os.makedirs(empty)

    code, text = runner.run(ARGS + [f"--workdir={wd}"], env)
    # (orbax's async readers may print "Exception ignored in <coroutine>" tracebacks of their
    # own for the unreadable step; posjax's part is the warning lines and a normal run)
    assert code == 0, text
    warnings = [line for line in text.splitlines() if line.startswith("warning: checkpoint")]
    assert len(warnings) == 2, text
    assert any(f"checkpoints/{steps[-2]} is unusable (the directory is empty)" in w
               for w in warnings), warnings
    assert any(f"checkpoints/{steps[-1]} is unusable" in w for w in warnings), warnings
    assert f"resuming from step {steps[0]}" in text, text
    assert len(os.listdir(os.path.join(wd, "checkpoints.corrupt"))) == 2
    assert f"done: step {STEPS}" in text, text


def test_interrupted_runs_resume_bitwise(tmp_path, env, reference):
    """Two workdirs, interrupted concurrently (chain_a, chain_b); every loss either logged and
    the final checkpoints equal the uninterrupted run's bit for bit."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    errors = []

    def run_b():
        try:
            chain_b(b, env)
        except BaseException as e:  # re-raised by the main thread
            errors.append(e)

    thread = threading.Thread(target=run_b, daemon=True)
    thread.start()
    chain_a(a, env)
    thread.join(timeout=900)
    if errors:
        raise errors[0]
    ref = reference()
    _compare_with_reference(a, ref)
    _compare_with_reference(b, ref)
