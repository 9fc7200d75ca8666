"""One writer per folder (posjax.writer_lock), with real concurrent processes: a second
process on a held folder is refused with one line and exit 2 naming the holder; a holder
killed with SIGKILL leaves a lock the next process takes over with one warning; a lease that
ran out on another host (or on gs://) is taken over, a fresh one is refused; and what the
holder wrote is neither lost nor written twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import types

import pytest

from posjax import writer_lock
from posjax.errors import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A tiny lock-holding program: holds argv[1] (as flag argv[2]), appends its tag to
# results.txt inside, says "held", and keeps the lock until its stdin closes. Refused: the
# entry points' one line (posjax.config.cli.fail) and exit 2.
HOLDER = """
import sys
sys.argv[0] = "holder.py"
from posjax import storage, writer_lock
from posjax.config.cli import fail
from posjax.errors import ConfigError
folder, field, tag = sys.argv[1:4]
try:
    with writer_lock.hold(folder, field=field):
        storage.append_text(storage.join(folder, "results.txt"), tag + "\\n")
        print("held", flush=True)
        sys.stdin.read()
except ConfigError as e:
    fail(str(e))
print("released", flush=True)
"""


def _env():
    return dict(os.environ, PYTHONPATH=REPO, PYTHONUNBUFFERED="1")


def _start(folder, tag, field="out"):
    """A holder process, returned once it holds `folder`."""
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), field, tag],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=_env())
    line = p.stdout.readline()
    assert line == "held\n", (line, p.stderr.read() if p.poll() is not None else "")
    return p


def _run(folder, tag, field="out"):
    """A holder that lets go at once: (exit code, stdout, stderr)."""
    r = subprocess.run([sys.executable, "-c", HOLDER, str(folder), field, tag], input="",
                       capture_output=True, text=True, env=_env(), timeout=60)
    return r.returncode, r.stdout, r.stderr


def _results(folder):
    return (folder / "results.txt").read_text().splitlines()


def test_second_process_is_refused_naming_the_holder(tmp_path):
    folder = tmp_path / "out"
    holder = _start(folder, "first")
    try:
        code, out, err = _run(folder, "second")
        assert code == 2, (out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        line = lines[0]
        assert line.startswith("holder.py: error: out=") and "is not allowed" in line, line
        record = json.loads((folder / writer_lock.LOCK_FILE).read_text())
        assert f"pid {holder.pid} on host {writer_lock.HOST}" in line, line
        assert f"started {record['started']}" in line, line
        assert str(folder / writer_lock.LOCK_FILE) in line and "--out" in line, line
        assert "held" not in out
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0, holder.stderr.read()
    # Nothing of the holder's was lost, nothing of the refused process's was written.
    assert _results(folder) == ["first"]
    # Released: the lock file stays (empty), the next process takes it without a warning.
    assert (folder / writer_lock.LOCK_FILE).read_text() == ""
    code, out, err = _run(folder, "third")
    assert (code, err) == (0, ""), err
    assert _results(folder) == ["first", "third"]


def test_two_started_together_one_is_refused(tmp_path):
    folder = tmp_path / "w"
    procs = [subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), "workdir", tag],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env())
             for tag in ("a", "b")]
    # Each either holds (says "held") or is refused; let the holder go once both decided.
    first = [p.stdout.readline() for p in procs]
    for p in procs:
        p.stdin.close()
    codes = sorted(p.wait(timeout=60) for p in procs)
    assert codes == [0, 2], (first, [p.stderr.read() for p in procs])
    assert sorted(first) == ["", "held\n"]
    assert len(_results(folder)) == 1


def test_holder_killed_with_sigkill_is_taken_over_with_one_warning(tmp_path):
    folder = tmp_path / "out"
    holder = _start(folder, "first")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=60)
    left = json.loads((folder / writer_lock.LOCK_FILE).read_text())
    assert left["pid"] == holder.pid  # the killed holder could not release
    code, out, err = _run(folder, "second")
    assert code == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: taking over the writer lock"), err
    assert f"pid {holder.pid} on host {writer_lock.HOST}" in lines[0]
    assert f"process {holder.pid} no longer exists" in lines[0]
    assert _results(folder) == ["first", "second"]


def test_sigterm_releases_the_lock(tmp_path):
    folder = tmp_path / "out"
    holder = _start(folder, "first")
    holder.send_signal(signal.SIGTERM)
    assert holder.wait(timeout=60) == 128 + signal.SIGTERM
    assert (folder / writer_lock.LOCK_FILE).read_text() == ""
    code, _, err = _run(folder, "second")
    assert (code, err) == (0, "")


def _record(host: str, age_s: float) -> dict:
    now = time.time() - age_s
    return {"host": host, "pid": 4242, "boot": None, "proc_start": None,
            "started": "2026-01-02 03:04:05 UTC", "program": "train.py", "lease_s": 300.0,
            "renewed_unix": now, "renewed": "then", "token": "theirs"}


def test_lease_of_another_host_local_folder(tmp_path, capsys):
    folder = tmp_path / "w"
    folder.mkdir()
    lock = folder / writer_lock.LOCK_FILE
    lock.write_text(json.dumps(_record("elsewhere", age_s=10)))
    with pytest.raises(ConfigError) as e:  # renewed 10 s ago: alive on its host
        with writer_lock.hold(folder):
            pass
    assert "pid 4242 on host elsewhere, started 2026-01-02 03:04:05 UTC" in str(e.value)
    assert json.loads(lock.read_text())["token"] == "theirs"  # refused: untouched
    lock.write_text(json.dumps(_record("elsewhere", age_s=writer_lock.LEASE_S + 30)))
    with writer_lock.hold(folder) as holder:
        assert json.loads(lock.read_text())["token"] == holder.token
    err = capsys.readouterr().err
    assert err.count("warning: taking over") == 1 and "its lease ran out" in err, err


def test_this_host_pid_reused_or_gone_is_stale():
    mine = _record(writer_lock.HOST, age_s=0)
    mine.update(pid=os.getpid(), proc_start=writer_lock._proc_stat(os.getpid())[1])
    assert writer_lock.stale_reason(mine) is None  # this very process: alive
    assert "started later" in writer_lock.stale_reason(dict(mine, proc_start=mine["proc_start"] - 1))
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert "no longer exists" in writer_lock.stale_reason(dict(mine, pid=child.pid, proc_start=None))
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # exits, not reaped yet
    deadline = time.time() + 30
    while writer_lock._proc_stat(zombie.pid)[0] != "Z" and time.time() < deadline:
        time.sleep(0.05)
    assert "no longer exists" in writer_lock.stale_reason(dict(mine, pid=zombie.pid, proc_start=None))
    zombie.wait()


@pytest.fixture
def gcs(monkeypatch):
    """gs:// on fsspec's in-memory filesystem (tests/storage/fake_gcs.py), this process only."""
    import fsspec

    from tests.storage import fake_gcs

    fsspec.register_implementation("gs", fake_gcs.MemoryGcs, clobber=True)
    fsspec.register_implementation("gcs", fake_gcs.MemoryGcs, clobber=True)
    # posjax.storage.check_filesystem asks for google-cloud-storage too (orbax's need)
    monkeypatch.setitem(sys.modules, "google.cloud.storage", types.ModuleType("storage"))
    monkeypatch.setattr(writer_lock, "SETTLE_S", 0.2)
    yield fake_gcs
    for key in [k for k in fake_gcs.MemoryGcs.store if k.startswith("/lock-test/")]:
        del fake_gcs.MemoryGcs.store[key]


def test_lease_on_gcs(gcs, capsys):
    from posjax import storage

    folder = "gs://lock-test/run"
    lock = writer_lock.lock_path(folder)
    storage.write_text(lock, json.dumps(_record("pod-host-3", age_s=5)))
    with pytest.raises(ConfigError, match="pid 4242 on host pod-host-3"):
        with writer_lock.hold(folder):
            pass
    storage.write_text(lock, json.dumps(_record("pod-host-3", age_s=writer_lock.LEASE_S + 1)))
    with writer_lock.hold(folder) as holder:
        assert json.loads(storage.read_text(lock))["token"] == holder.token
        with writer_lock.hold(folder) as again:  # the same process, nested: the same hold
            assert again is holder
        # A holder that stalled past its lease and was taken over learns it at its renewal.
        storage.write_text(lock, json.dumps(_record("pod-host-4", age_s=0)))
        assert holder.renew() is False
        storage.write_text(lock, json.dumps(dict(holder.record)))  # give it back for release
        holder.lost = False
    assert not storage.exists(lock)  # released: the record object is gone
    err = capsys.readouterr().err
    assert err.count("taking over") == 1 and err.count("lost the writer lock") == 1, err


def test_gcs_two_starting_together_one_wins(gcs):
    folder = "gs://lock-test/race"
    holders = [writer_lock.Holder(folder, "workdir") for _ in range(2)]
    outcome = {}

    def start(i):
        try:
            holders[i].acquire()
            outcome[i] = "held"
        except ConfigError as e:
            outcome[i] = str(e)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i in range(2) if outcome[i] == "held"]
    assert len(winners) == 1, outcome
    assert "holds it" in outcome[1 - winners[0]]
    holders[winners[0]].release()


def test_a_refused_or_failed_start_leaves_no_folder(tmp_path):
    folder = tmp_path / "new"
    with pytest.raises(RuntimeError):
        with writer_lock.hold(folder):
            raise RuntimeError("bad input found after the lock was taken")
    assert not folder.exists()
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(ConfigError, match="a directory"):
        with writer_lock.hold(afile):
            pass


def test_eval_driver_refuses_an_out_in_use(tmp_path):
    from posjax.evaluation import driver

    out = tmp_path / "out"
    holder = _start(out, "first")
    try:
        with pytest.raises(ConfigError) as e:
            driver.run(driver.Request(out=str(out), workdirs=[str(tmp_path / "run")],
                                      lengths=[32], methods=["as_is"]))
        assert e.value.field == "out" and f"pid {holder.pid}" in str(e.value)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert sorted(os.listdir(out)) == [writer_lock.LOCK_FILE, "results.txt"]


@pytest.mark.slow
def test_two_train_py_on_one_workdir_and_eval_py_on_an_out_in_use(tmp_path):
    """Two real train.py on one workdir: the second is refused while the first runs (stopped
    with SIGSTOP once it holds the workdir, so the timing cannot let it finish first); the
    first then trains to its end with every step in metrics.jsonl once. eval.py on an --out
    in use is refused the same way."""
    from tests.reliability import runner

    env = runner.make_env()
    wd = str(tmp_path / "run")
    args = runner.ARGS + [f"--workdir={wd}"]
    first = runner.Run(args, env)
    second = {}

    def while_stopped(run):
        run.signal(signal.SIGSTOP)
        try:
            second["r"] = subprocess.run([sys.executable, "train.py", *args], cwd=REPO, env=env,
                                         capture_output=True, text=True, timeout=300)
        finally:
            run.signal(signal.SIGCONT)

    code = first.watch([(lambda line: line.startswith("posjax train:"), while_stopped)])
    assert code == 0, first.text[-3000:]
    r = second["r"]
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("train.py: error: workdir="), r.stderr
    assert f"pid {first.proc.pid} on host {writer_lock.HOST}" in lines[0], lines[0]
    assert "posjax train:" not in r.stdout
    steps = [m["step"] for m in runner.metrics(wd)]
    assert steps == list(range(1, runner.STEPS + 1)), steps  # each step once
    assert "warning" not in first.text

    out = tmp_path / "eval"
    holder = _start(out, "holder")
    try:
        r = subprocess.run([sys.executable, "eval.py", f"--workdir={wd}", f"--out={out}",
                            "--lengths=32", "--methods=as_is"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eval.py: error: out="), r.stderr
    assert f"pid {holder.pid}" in lines[0] and "--out" in lines[0], lines[0]
    assert sorted(os.listdir(out)) == [writer_lock.LOCK_FILE, "results.txt"]
