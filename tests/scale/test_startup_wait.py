"""Multi-process start-up never hangs silently: a process whose peers never come says what it
waits for, gives up after --init_timeout with one error line (exit 1, instead of XLA's C++
abort after 5 minutes), and stops at once on SIGTERM / SIGINT with the start-up message.
Loopback only: the coordinator binds 127.0.0.1 (JAX_COORDINATOR_BIND_ADDRESS)."""

import signal
import socket
import time

import pytest

from posjax.training import multihost, signals
from tests.reliability import runner

# Each subprocess case starts train.py (JAX import) and waits on purpose.
slow = pytest.mark.slow

ARGS = ["--config=configs/base.py:tiny", "--progress_bar=false"]
TIMEOUT_S = 4


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback(port: int) -> dict:
    return {"JAX_COORDINATOR_BIND_ADDRESS": f"127.0.0.1:{port}"}


def _fake_slurm(port: int, ntasks: int, procid: int) -> dict:
    """What srun sets for one task of a 4-task step on this host (jax reads these)."""
    return {"SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "localhost",
            "SLURM_NTASKS": str(ntasks), "SLURM_PROCID": str(procid), "SLURM_LOCALID": "0",
            "JAX_COORDINATOR_PORT": str(port), **_loopback(port)}


def _timed_run(args, extra_env, tmp_path):
    t0 = time.monotonic()
    code, text = runner.run(ARGS + [f"--workdir={tmp_path / 'run'}", *args], runner.make_env(),
                            extra_env=extra_env)
    return code, text.splitlines(), time.monotonic() - t0


@pytest.mark.slow
@slow
@pytest.mark.parametrize("process_id", [0, 1])
def test_missing_peer_times_out_with_one_line(tmp_path, process_id):
    port = _port()
    code, lines, took = _timed_run(
        [f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
         f"--process_id={process_id}", f"--init_timeout={TIMEOUT_S}"], _loopback(port), tmp_path)
    assert code == 1, lines
    assert lines[0] == (f"process {process_id}: waiting for 2 processes at 127.0.0.1:{port} "
                        f"(timeout {TIMEOUT_S} s)"), lines
    assert lines[1:] == [f"train.py: error: timed out after {TIMEOUT_S} s (--init_timeout) "
                         f"waiting for 2 processes at 127.0.0.1:{port}; start every process "
                         "(the same coordinator address and process count, each its own "
                         "process id) or raise --init_timeout"], lines
    assert took < TIMEOUT_S + 40  # jax's own abort would come at 5 minutes
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.slow
@slow
def test_fake_slurm_names_the_detected_cluster_and_times_out(tmp_path):
    port = _port()
    code, lines, _ = _timed_run([f"--init_timeout={TIMEOUT_S}"], _fake_slurm(port, 4, 2),
                                tmp_path)
    assert code == 1, lines
    assert lines[0] == f"process 2: waiting for 4 processes at localhost:{port} (timeout " \
                       f"{TIMEOUT_S} s)", lines
    assert len(lines) == 2 and lines[1].startswith("train.py: error: timed out after"), lines


@slow
def test_partial_slurm_environment_is_one_line_exit_2(tmp_path):
    code, lines, _ = _timed_run([], {"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, tmp_path)
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith(
        "train.py: error: cluster='slurm' is not allowed: an environment jax.distributed can "
        "read"), lines


@slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_the_wait_stops_at_once(tmp_path, sig):
    port = _port()
    run = runner.Run(ARGS + [f"--workdir={tmp_path / 'run'}"], runner.make_env(),
                     extra_env=_fake_slurm(port, 4, 0))
    sent = []

    def send(r):
        sent.append(time.monotonic())
        r.signal(sig)

    code = run.watch([(lambda line: "waiting for 4 processes" in line, send)], timeout=120)
    assert code == 0, run.text
    assert time.monotonic() - sent[0] < 10, run.text  # default --init_timeout is 300 s
    assert run.lines[1:] == [f"{sig.name}: stopped during start-up, before training began; "
                             "nothing needed saving; no checkpoint yet"], run.text


@pytest.mark.parametrize("when", ["announce", "thread start"])
def test_a_signal_right_after_the_announcement_still_exits_at_once(monkeypatch, when):
    """A launcher reacts to the announcement line, so its signal can land before the wait loop
    (while the line is printed, or while the helper thread starts). That Interrupted must be
    marked exit_now too: a normal exit tears down the coordination service the thread may have
    started, and its C++ teardown logs 'Barrier failed because service is shutting down'."""
    def interrupt(*_):
        raise signals.Interrupted("SIGTERM")

    started = []
    monkeypatch.setattr(multihost.jax.distributed, "initialize", lambda **kw: started.append(kw))
    if when == "thread start":
        monkeypatch.setattr(multihost.threading.Thread, "start", interrupt)
    announce = interrupt if when == "announce" else (lambda line: None)
    params = dict(coordinator_address="127.0.0.1:1", num_processes=2, process_id=0)
    with pytest.raises(signals.Interrupted) as caught:
        multihost._wait_for_cluster(params, 5, announce)
    assert caught.value.exit_now
    assert started == []
