"""posjax.launch.tpu --dry_run: the gcloud commands for a slice, checked without a TPU (no
jax is imported): one launch per worker with the same environment and train.py flags, the
mesh flags of the preset for the slice's shape, and one-line errors for bad input."""

import os
import shlex
import subprocess
import sys

import pytest

from posjax.config import defaults
from posjax.launch import slices, tpu

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = ["--name=nezha-pod", "--zone=us-central2-b", "--project=p", "--bucket=gs://bkt/x",
        "--repo=https://example.com/posjax.git", "--dry_run"]


def dry_run(capsys, *args):
    assert tpu.main([*BASE, *args]) == 0
    out = capsys.readouterr().out
    sections, current = {}, None
    for line in out.splitlines():
        if line.startswith("# ") and line[2:] in tpu.STEPS:
            current = sections.setdefault(line[2:], [])
        elif line and current is not None:
            current.append(shlex.split(line))
    return sections


def remote(cmd):
    """(worker, shell words of --command) of a `gcloud ... tpu-vm ssh` command."""
    worker = next(c.split("=", 1)[1] for c in cmd if c.startswith("--worker="))
    command = next(c.split("=", 1)[1] for c in cmd if c.startswith("--command="))
    return worker, shlex.split(command)


@pytest.mark.parametrize("name,workers,per", [("v4-32", 4, 4), ("v5litepod-8", 1, 8),
                                               ("v6e-64", 16, 4), ("v5p-128", 16, 4)])
def test_one_launch_per_worker_with_the_same_env_and_flags(capsys, name, workers, per):
    s = dry_run(capsys, f"--slice={name}", "--preset=fsdp", "--", "--config.train.steps=1000")
    launches = [remote(c) for c in s["launch"]]
    assert [w for w, _ in launches] == [str(i) for i in range(workers)]
    for i, (_, words) in enumerate(launches):
        assert "PYTHONUNBUFFERED=1" in words
        assert "JAX_COMPILATION_CACHE_DIR=gs://bkt/x/jax_cache" in words
        train = words[words.index("train.py") + 1:words.index(">")]
        assert train == ["--config=configs/nezha.py:base", "--workdir=gs://bkt/x/runs/nezha-pod",
                         "--config.mesh.preset=fsdp", "--config.mesh.data=-1",
                         f"--config.mesh.fsdp={per}", "--config.mesh.tensor=1",
                         "--progress_bar=false", "--config.train.steps=1000"]
        assert words[words.index(">") + 1] == f"~/posjax-train-{i}.log" and words[-1] == "&"
    # every train.py override names a real config field
    config = defaults.get_config("base")
    for flag in train:
        if flag.startswith("--config."):
            key = flag[len("--config."):].split("=")[0]
            node = config
            for part in key.split("."):
                assert part in node, key
                node = node[part]
    # every chip is used: data * fsdp * tensor = chips (-1 = the rest)
    assert slices.get(name).chips == workers * per


def test_create_install_resume_eval(capsys):
    s = dry_run(capsys, "--slice=v4-32", "--spot")
    create = s["create"][0]
    assert create[:5] == ["gcloud", "compute", "tpus", "queued-resources", "create"]
    assert "--accelerator-type=v4-32" in create and "--spot" in create
    assert "--runtime-version=tpu-ubuntu2204-base" in create
    worker, install = remote(s["install"][0])
    assert worker == "all"
    assert f"'jax[tpu]=={tpu.jax_version()}'" in s["install"][0][-1]
    assert "gcsfs" in install and "requirements.txt" in install
    # resume = delete, create, install, then the same launches (train.py resumes by itself)
    assert s["resume"][0][4] == "delete"
    assert s["resume"][-4:] == s["launch"]
    assert s["launch"][0][-1].count("--config.mesh.preset=data") == 1  # the default preset
    worker, ev = remote(s["eval"][0])
    assert worker == "0" and "eval.py" in ev and "--out=gs://bkt/x/eval/nezha-pod" in ev
    assert "TPU_VISIBLE_CHIPS=0,1,2,3" in ev  # worker 0's own chips only
    assert "gs://bkt/x/runs/nezha-pod/tb" in s["tensorboard"][0][-1]


def test_jax_version_is_the_pinned_one():
    with open(os.path.join(REPO, "requirements.txt")) as f:
        assert f"jax=={tpu.jax_version()}\n" in f.read()


@pytest.mark.parametrize("args,words", [
    (["--slice=v9-32"], ["slice='v9-32'", "v4-8", "v5litepod-16", "v6e-256"]),
    (["--slice=v4-8", "--preset=zero"], ["preset='zero'", "data, fsdp, fsdp_tp"]),
    (["--slice=v4-8", "--bucket=/local/dir"], ["bucket=", "gs://"]),
    (["--slice=v4-8", "--", "--steps=3"], ["overrides=", "--config."]),
])
def test_bad_input_is_one_line_exit_2(args, words):
    r = subprocess.run([sys.executable, "-m", "posjax.launch.tpu", *BASE, *args], cwd=REPO,
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], lines[0]
