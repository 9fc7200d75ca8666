"""One writer per folder: a training workdir or an eval --out is written by one process at a time.

Two processes writing one folder lose data without an error: each rewrites results.json from
its own older read, or appends every training step to metrics.jsonl twice. So the writer holds
a lock for as long as it runs (`hold`), and a second process is refused with a ConfigError
naming the holder (host, pid, start time) and the lock file, before it writes anything.

The lock is one file in the folder, LOCK_FILE, holding a JSON record of its holder.

- Local paths: filelock's FileLock(timeout=0) (flock) refuses a second holder on this host at
  once, and the kernel drops the flock however the holder ends. The record is written into the
  locked file in place (a rename would put a new, unlocked file there). A record found by the
  next holder means the last one did not release (killed): it takes over with a warning.
- Object stores (gs://) and holders on another host (a shared filesystem, where flock may not
  reach between machines): a lease. The holder renews its record every RENEW_S seconds; a
  record not renewed for LEASE_S is stale (by the reader's clock: hosts must agree to well
  within LEASE_S, as NTP keeps them). epath has no exclusive create on object stores, so a
  new holder writes its record, waits SETTLE_S and reads it back: of two that started together,
  the one whose record is there holds the lock, the other is refused.
- On this host a record whose process is gone is stale at once: no such pid, a zombie, a pid
  now used by a process started later (/proc/<pid>/stat's start time), or a machine restarted
  since (its boot id).

Multi-process runs: only the process that writes (process 0) holds it; the caller decides
(`enabled`). A process holding a folder may enter `hold` on it again (nested library calls).
While held, a SIGTERM that nothing else handles ends the process through Python (exit code
128 + 15), so the lock is released; train.py's own handler (finish the step, save) is kept.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from typing import Iterator, Optional

import filelock

from posjax import storage
from posjax.errors import ConfigError

LOCK_FILE = ".posjax_writer.lock"
# A holder on another host (or on an object store) is taken to be gone when its record has
# not been renewed for this long; it renews every RENEW_S, so a few missed renewals (a slow
# bucket, a long compile holding the GIL) do not lose the lock.
LEASE_S = 300.0
RENEW_S = 60.0
# Object stores: the wait between writing a new record and reading it back (longer than the
# time between another starter's read and its write).
SETTLE_S = 2.0

HOST = socket.gethostname()
# What flock answers on a filesystem without it (some network filesystems): lease only there.
_NO_FLOCK = (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP)

_HELD: dict = {}  # folder -> [Holder, depth]: the folders this process holds
_HELD_LOCK = threading.Lock()


def lock_path(folder) -> str:
    return storage.join(folder, LOCK_FILE)


def entries(folder) -> list[str]:
    """Names in `folder` other than the lock file (what a 'is it empty?' check should see)."""
    return [n for n in storage.listdir(folder) if n != LOCK_FILE]


# -- who is alive -----------------------------------------------------------------------------


def _read_file(path: str) -> Optional[str]:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _boot_id() -> Optional[str]:
    text = _read_file("/proc/sys/kernel/random/boot_id")
    return text.strip() if text else None


def _proc_stat(pid: int) -> Optional[tuple[str, int]]:
    """(state, start time in clock ticks since boot) of `pid` from /proc, or None."""
    text = _read_file(f"/proc/{pid}/stat")
    if not text:
        return None
    fields = text.rpartition(")")[2].split()  # the command name may hold spaces and ')'
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def _process_start_unix(ticks: Optional[int]) -> float:
    """This process's start as a Unix time (boot time + ticks), or now where /proc is absent."""
    stat = _read_file("/proc/stat") or ""
    btime = next((int(line.split()[1]) for line in stat.splitlines()
                  if line.startswith("btime ")), None)
    if ticks is None or btime is None:
        return time.time()
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _utc(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S UTC")


def stale_reason(record: dict, now: Optional[float] = None) -> Optional[str]:
    """Why the holder in `record` is gone, or None while it may still be writing."""
    now = time.time() if now is None else now
    if record.get("host") == HOST:
        if record.get("boot") and _boot_id() and record["boot"] != _boot_id():
            return "this machine has restarted since"
        pid = int(record.get("pid", -1))
        stat = _proc_stat(pid)
        if not _pid_exists(pid) or (stat is not None and stat[0] in ("Z", "X")):
            return f"process {pid} no longer exists"
        start = record.get("proc_start")
        if stat is not None and start is not None and stat[1] != int(start):
            return f"pid {pid} now belongs to a process started later"
        return None
    age = now - float(record.get("renewed_unix", 0.0))
    lease = float(record.get("lease_s", LEASE_S))
    if age > lease:
        return f"its lease ran out (not renewed for {age:.0f} s; the lease is {lease:.0f} s)"
    return None


def describe(record: Optional[dict]) -> str:
    if not record:
        return "another process (its record is not written yet)"
    return (f"{record.get('program') or 'a process'} pid {record.get('pid')} on host "
            f"{record.get('host')}, started {record.get('started')}")


# -- the holder -------------------------------------------------------------------------------


class Holder:
    """One held lock: its record, the local flock (if any) and the renewing thread."""

    def __init__(self, folder: str, field: str):
        self.folder = folder
        self.field = field
        self.path = lock_path(folder)
        self.local = storage.is_local(folder)
        self.token = uuid.uuid4().hex
        self.flock: Optional[filelock.FileLock] = None
        self.created = False
        self.lost = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        stat = _proc_stat(os.getpid())
        ticks = stat[1] if stat else None
        self.record = {"host": HOST, "pid": os.getpid(), "boot": _boot_id(), "proc_start": ticks,
                       "started": _utc(_process_start_unix(ticks)),
                       "program": os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0]
                       else None, "lease_s": LEASE_S, "token": self.token}

    # -- record I/O -----------------------------------------------------------------------

    def read(self, tries: int = 1) -> Optional[dict]:
        """The record in the lock file; None when there is none. A missing, empty or
        half-written record (a holder writes it in place just after taking the flock) is read
        again, up to `tries` times."""
        for attempt in range(tries):
            try:
                record = json.loads(storage.read_text(self.path))
            except (OSError, ValueError):  # none, empty, or half written (UnicodeDecodeError too)
                record = None
            if isinstance(record, dict):
                return record
            if attempt + 1 < tries:
                time.sleep(0.05)
        return None

    def write(self) -> None:
        now = time.time()
        self.record.update(renewed_unix=now, renewed=_utc(now))
        text = json.dumps(self.record, sort_keys=True) + "\n"
        if self.local:  # in place: the flock belongs to this file (module doc)
            storage.path(self.path).write_text(text)
        else:
            storage.write_text(self.path, text)

    # -- acquire / renew / release --------------------------------------------------------

    def refusal(self, record: Optional[dict]) -> ConfigError:
        other = {"out": "--out", "workdir": "--workdir"}.get(self.field, "folder")
        return ConfigError(self.field, self.folder, (
            f"a folder no other process is writing: {describe(record)} holds it (lock file "
            f"{self.path}); wait for it to end or choose another {other}"))

    def take_over_if_stale(self) -> None:
        """Refuse a live holder's record; take over a gone one's with a warning."""
        record = self.read()
        if record is None or record.get("token") == self.token:
            return
        reason = stale_reason(record)
        if reason is None:
            raise self.refusal(record)
        warn(f"taking over the writer lock of {self.folder} from {describe(record)}: {reason} "
             f"(lock file {self.path})")

    def acquire(self) -> None:
        storage.check_filesystem(self.folder, self.field)
        if storage.isfile(self.folder):
            raise ConfigError(self.field, self.folder, "a directory (it is a file)")
        self.created = not storage.exists(self.folder)
        try:
            storage.makedirs(self.folder)
            if self.local and self._acquire_flock():
                try:
                    self.take_over_if_stale()
                    self.write()
                except BaseException:
                    self.flock.release()
                    self.flock = None
                    raise
            else:
                self._acquire_lease()
        except OSError as e:
            raise ConfigError(self.field, self.folder, "a writable directory "
                              f"({e.strerror or type(e).__name__})") from None
        self._thread = threading.Thread(target=self._renew_loop, daemon=True,
                                        name=f"posjax writer lock {self.folder}")
        self._thread.start()

    def _acquire_flock(self) -> bool:
        """Take the local flock. False where this filesystem has none (lease only)."""
        lock = filelock.FileLock(os.fspath(storage.path(self.path)), timeout=0,
                                 fallback_to_soft=False)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise self.refusal(self.read(tries=20)) from None
        except OSError as e:
            if e.errno in _NO_FLOCK:
                return False
            raise
        self.flock = lock
        return True

    def _acquire_lease(self) -> None:
        self.take_over_if_stale()
        self.write()
        time.sleep(SETTLE_S)
        back = self.read(tries=3)
        if back is None or back.get("token") != self.token:
            raise self.refusal(back)

    def renew(self) -> bool:
        """Rewrite the record with a new renewal time. False (and one warning) when another
        process has taken the lock over meanwhile (this one stalled past its lease)."""
        record = self.read(tries=3)
        if record is not None and record.get("token") != self.token:
            self.lost = True
            warn(f"lost the writer lock of {self.folder} to {describe(record)} (this process "
                 f"did not renew it for over {LEASE_S:.0f} s); the folder has two writers now")
            return False
        self.write()
        return True

    def _renew_loop(self) -> None:
        while not self._stop.wait(RENEW_S):
            try:
                if not self.renew():
                    return
            except OSError as e:  # a storage hiccup: the next renewal may get through
                warn(f"could not renew the writer lock {self.path}: {e}")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if not self.lost and (self.read() or {}).get("token") == self.token:
                if self.local:
                    storage.path(self.path).write_text("")
                    if self.created and entries(self.folder) == []:
                        # a folder this run only created for its lock goes again (a refused
                        # or failed start leaves nothing behind); removed while still locked
                        storage.remove(self.path)
                        with contextlib.suppress(OSError):
                            os.rmdir(os.fspath(storage.path(self.folder)))
                else:
                    storage.remove(self.path)
        finally:
            if self.flock is not None:
                self.flock.release()
                self.flock = None


def warn(line: str) -> None:
    """One line on stderr that the user must see."""
    sys.stderr.write(f"warning: {line}\n")
    sys.stderr.flush()


@contextlib.contextmanager
def hold(folder, *, field: str = "workdir", enabled: bool = True) -> Iterator[Optional[Holder]]:
    """Hold the writer lock of `folder` for the body (module doc). ConfigError on `field` when
    another live process holds it. enabled=False: a no-op (processes other than 0)."""
    if not enabled:
        yield None
        return
    key = os.fspath(storage.path(folder))
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is not None:
            held[1] += 1
    if held is not None:
        try:
            yield held[0]
        finally:
            with _HELD_LOCK:
                held[1] -= 1
        return
    holder = Holder(key, field)
    holder.acquire()
    with _HELD_LOCK:
        _HELD[key] = [holder, 1]
    previous = _exit_on_sigterm()
    try:
        yield holder
    finally:
        with _HELD_LOCK:
            del _HELD[key]
        try:
            holder.release()
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm():
    """Install a SIGTERM handler that exits through Python (finally blocks run, the lock is
    released) where nothing else handles SIGTERM. Returns the handler to restore, or None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None

    def terminate(signum, frame):
        del frame
        sys.stderr.write(f"{signal.Signals(signum).name}: stopping (the writer lock is "
                         "released)\n")
        sys.stderr.flush()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    return signal.SIG_DFL
