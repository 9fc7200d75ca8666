"""Workdirs on a non-local filesystem: a tiny training, a resume after a (simulated)
preemption and an eval, with every workdir file on gs:// paths served by an in-memory stand-in
for Cloud Storage (tests/storage/fake_gcs.py: fsspec for epath, the GCS JSON API for
TensorStore). Nothing may land on the local disk; and a gs:// workdir on a machine without
gcsfs is one line and exit 2, before anything is written."""

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.reliability import runner

# Slow tier: whole train.py / eval.py runs in subprocesses.
pytestmark = pytest.mark.slow

REPO = runner.REPO


def test_train_resume_and_eval_on_gcs(tmp_path):
    env = runner.make_env()
    result = subprocess.run([sys.executable, "-m", "tests.storage.gcs_run"], cwd=tmp_path,
                            env=dict(env, PYTHONPATH=REPO), capture_output=True, text=True,
                            timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["first"] == {"start": 0, "step": 12}
    assert out["second"] == {"start": 4, "step": 12}, out["resumed_line"]
    assert out["resumed_line"] == [
        "resuming from step 4 in gs://posjax-test/runs/tiny/checkpoints"]
    # Exact resume: steps 5..12 of the resumed run have the losses of the first run's.
    first, again = {}, {}
    for step, loss in out["metrics"]:
        (again if step in first and step > 4 else first)[step] = loss
    assert sorted(again) == list(range(5, 13)), out["metrics"]
    assert all(again[s] == first[s] for s in again), (first, again)

    run, ev = "gs://posjax-test/runs/tiny/", "gs://posjax-test/eval/tiny/"
    files = set(out["files"])
    for name in ("config.json", "vocab.txt", "vocab.fingerprint", "metrics.jsonl"):
        assert run + name in files, name
    assert any(f.startswith(run + "tb/events.out.tfevents") for f in out["files_after_first"])
    for step in (4, 8, 12):
        assert f"{run}checkpoints/{step}/state/manifest.ocdbt" in files, step
        assert f"{run}checkpoints/{step}/commit_success.txt" in files, step
    for name in ("results.json", "results.csv", "results.md", "accuracy_vs_length.png"):
        assert ev + name in files, name
    assert set(out["cells"].values()) == {"ok"} and len(out["cells"]) == 2, out["cells"]
    assert out["local_entries"] == []  # nothing was written to the working directory


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None,
                    reason="gcsfs is installed here: gs:// workdirs are allowed")
def test_gcs_workdir_without_gcsfs_is_one_line_exit_2(tmp_path):
    env = dict(runner.make_env())
    result = subprocess.run(
        [sys.executable, "train.py", "--config=configs/base.py:tiny",
         "--workdir=gs://posjax-test/nothing"], cwd=REPO, env=env, capture_output=True,
        text=True, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install gcsfs" in lines[0], result.stderr
    result = subprocess.run(
        [sys.executable, "eval.py", f"--workdir={tmp_path}", "--out=gs://posjax-test/out"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "pip install gcsfs" in result.stderr, result.stderr
