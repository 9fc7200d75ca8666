"""Same training under every mesh, preset and process count; checkpoints restore across them.

Runs tests/scale/worker.py in subprocesses with 8 simulated CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count) so this pytest process keeps its single
device: one subprocess trains 5 steps under four meshes plus train.py's loop with a resume,
then two real processes (4 devices each, gloo collectives on 127.0.0.1) train the same steps
and resume the same checkpoint.

Tolerance: losses agree to 1e-5 relative and parameters to 1e-5 absolute. They are not
bit-identical: sharded matmuls and all-reduces sum in a different order (measured: losses
agree to ~1e-7 relative, parameters to ~1.2e-7 after 5 LAMB steps).
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.reliability import runner

# Slow tier: several processes or simulated devices (meshes).
pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "worker.py")
RTOL = 1e-5
PARAM_ATOL = 1e-5


def _env(devices: int) -> dict:
    # the session's compilation cache: train.py's loop and the resumes reuse the hand-stepped
    # runs' compiled steps (the same programs), and the second run of each process its first
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               XLA_FLAGS=runner.xla_flags(devices),
               JAX_COMPILATION_CACHE_DIR=runner.session_cache(),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    return env


def _check(proc: subprocess.CompletedProcess, what: str) -> None:
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout[-4000:]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    out = root / "meshes.json"
    proc = subprocess.run([sys.executable, WORKER, "meshes", str(root), str(out)], cwd=ROOT,
                          env=_env(8), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=900)
    _check(proc, "8-device run")
    meshes = json.loads(out.read_text())

    with socket.socket() as s:  # a free port for the coordinator
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pout = root / "processes.json"
    procs = [subprocess.Popen([sys.executable, WORKER, "process", str(root), str(pout), str(port),
                               str(i)], cwd=ROOT, env=_env(4), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    for i, (p, text) in enumerate(zip(procs, outputs)):
        _check(subprocess.CompletedProcess(p.args, p.returncode, text), f"process {i}")
    return root, meshes, json.loads(pout.read_text()), outputs


def test_every_mesh_gives_the_same_losses(runs):
    _, meshes, _, _ = runs
    reference = meshes["losses"]["1x1x1"]
    assert len(reference) == 5 and all(np.isfinite(reference))
    for name, losses in meshes["losses"].items():
        np.testing.assert_allclose(losses, reference, rtol=RTOL, err_msg=name)
    # train.py's loop (8x1x1, 'data' preset) sees the same batches as the hand-stepped runs
    np.testing.assert_allclose(meshes["loop_8x1x1"], reference, rtol=RTOL)


def test_every_mesh_gives_the_same_parameters(runs):
    root, meshes, _, _ = runs
    z = np.load(root / "params.npz")
    names = sorted({k.split("|", 1)[1] for k in z.files})
    assert len(names) > 10
    for mesh in meshes["losses"]:
        for n in names:
            np.testing.assert_allclose(z[f"{mesh}|{n}"], z[f"1x1x1|{n}"], rtol=0, atol=PARAM_ATOL,
                                       err_msg=f"{mesh} {n}")


def test_parameter_shardings_follow_the_preset(runs):
    _, meshes, _, _ = runs
    specs = meshes["specs"]
    q = "encoder/layers/0/attention/query/kernel"  # [embed, heads, kv]
    word = "encoder/embeddings/word/embedding"  # [vocab, embed]
    wi = "encoder/layers/0/mlp/wi/kernel"  # [embed, mlp]
    # 'data': everything replicated
    assert all(all(a is None for a in s) for s in specs["8x1x1"].values())
    # 'fsdp': the embedding axis over fsdp, nothing over tensor
    assert specs["2x4x1"][q] == ["fsdp", None, None]
    assert specs["2x4x1"][word] == [None, "fsdp"]
    assert specs["2x4x1"][wi] == ["fsdp", None]
    # 'fsdp_tp': embed over fsdp, heads / mlp / vocab over tensor
    assert specs["2x2x2"][q] == ["fsdp", "tensor", None]
    assert specs["2x2x2"][word] == ["tensor", "fsdp"]
    assert specs["2x2x2"][wi] == ["fsdp", "tensor"]
    # a 1-device mesh replicates everything whatever the preset says
    assert all(all(a is None for a in s) for s in specs["1x1x1"].values())


def test_checkpoint_of_8x1x1_resumes_under_2x2x2_identically(runs):
    _, meshes, _, _ = runs
    resumed = meshes["resumed_2x2x2"]
    assert resumed["start"] == 3
    np.testing.assert_allclose(resumed["losses"], meshes["loop_8x1x1"][3:], rtol=RTOL)


def test_two_processes_match_one(runs):
    _, meshes, processes, outputs = runs
    np.testing.assert_allclose(processes["losses"], meshes["losses"]["1x1x1"], rtol=RTOL)
    # only process 0 prints the training lines
    assert "step 5 | loss" in outputs[0] and "step 5 | loss" not in outputs[1]


def test_single_process_checkpoint_resumes_on_two_processes(runs):
    _, meshes, processes, _ = runs
    assert processes["resumed_start"] == 3
    np.testing.assert_allclose(processes["resumed_losses"], meshes["loop_8x1x1"][3:], rtol=RTOL)
