"""Non-finite loss at step 4, injected (nan_train.py), under both train.nan_policy values.

'stop' (default): saves the last good state (step 3; the periodic checkpoint is step 2), exit 1,
one line naming the step and the saved checkpoint. 'skip' on the same workdir: resumes from that
checkpoint, skips step 4's update (the parameters are carried over unchanged), counts and logs
it, and finishes bit for bit where a 'skip' run from scratch (run at the same time) finishes,
which holds only if the saved step 3 was exactly the state after step 3.
"""

import os
import re

import numpy as np
import pytest

from tests.reliability import runner

# Slow tier: whole train.py / eval.py runs in subprocesses.
pytestmark = pytest.mark.slow

ARGS = ["--config=configs/base.py:tiny", "--config.train.steps=5", "--config.train.warmup_steps=1",
        "--config.train.log_every=1", "--config.train.eval_every=0",
        "--config.train.checkpoint_every=2", "--progress_bar=false"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return runner.make_env()


def _start(wd, env, policy):
    return runner.Run(ARGS + [f"--workdir={wd}", f"--config.train.nan_policy={policy}"], env,
                      script=runner.NAN_RUNNER, extra_env={"POSJAX_NAN_AT_STEP": "4"})


def _run(wd, env, policy):
    r = _start(wd, env, policy)
    return r.watch([]), r.text


def test_nan_stop_then_skip(tmp_path, env):
    wd, ref = str(tmp_path / "run"), str(tmp_path / "skip_from_scratch")
    reference = _start(ref, env, "skip")
    code, text = _run(wd, env, "stop")
    assert code == 1, text
    errors = [line for line in text.splitlines() if line.startswith("train.py: error:")]
    assert len(errors) == 1 and "Traceback" not in text, text
    ckpts = os.path.join(wd, "checkpoints")
    assert re.fullmatch(
        r"train\.py: error: loss or gradient is not finite at step 4 "
        rf"\(train\.nan_policy='stop'\); saved the last good state, step 3, in "
        rf"{re.escape(ckpts)}", errors[0])
    assert runner.checkpoint_steps(wd) == [2, 3]
    good, _ = runner.load_checkpoint(wd, 3)
    assert int(good["step"]) == 3 and int(good["skipped"]) == 0
    assert all(np.isfinite(x).all() for x in _leaves(good["params"]))

    code, text = _run(wd, env, "skip")
    assert code == 0, text
    assert "resuming from step 3" in text
    assert re.search(r"^step 4: non-finite loss/gradient, update skipped \(1 skipped so far\)$",
                     text, re.M), text
    assert re.search(r"^step 5 \| loss [0-9.]+ .*\| skipped 1$", text, re.M), text
    final, _ = runner.load_checkpoint(wd, 5)
    assert int(final["step"]) == 5 and int(final["skipped"]) == 1
    assert all(np.isfinite(x).all() for x in _leaves(final["params"]))
    logged = {m["step"]: m for m in runner.metrics(wd)}
    assert logged[4]["skipped_total"] == 1 and np.isnan(logged[4]["step_loss"])
    assert np.isfinite(logged[5]["step_loss"])

    assert reference.watch([]) == 0, reference.text
    ref_final, ref_data = runner.load_checkpoint(ref, 5)
    final, data = runner.load_checkpoint(wd, 5)
    runner.assert_trees_equal(final, ref_final)
    assert data == ref_data
    assert logged[5]["step_loss"] == runner.step_losses(ref)[5][0]


def _leaves(tree):
    import jax

    return [np.asarray(x) for x in jax.tree.leaves(tree)]
