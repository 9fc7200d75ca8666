"""SIGTERM / SIGINT: finish the current step, save, exit 0. A second signal exits at once.

Preemptible machines send SIGTERM with a grace period; Ctrl-C sends SIGINT. The first one only
sets a flag that the loop checks between steps, so no step is cut in half and the checkpoint is
of the last completed step. If saving hangs, a second signal ends the process immediately
(exit code 128 + signal number, as a shell reports a killed process); the previous complete
checkpoint is still there because orbax writes new ones to a temporary directory first.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Optional

from posjax import storage

HANDLED = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """A signal arrived during start-up. A BaseException, so no `except Exception` on the way
    up (a storage error handler, a fallback) mistakes it for a failure and carries on.

    exit_now: a thread is still blocked where Python cannot stop it (jax.distributed waiting
    for the other processes), so after its message the process must end with os._exit: a
    normal exit would run jax's C++ teardown, which waits on or logs about that thread."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.exit_now = False


def startup_message(signal_name: str, workdir: Optional[str]) -> str:
    """The one line printed when start-up was interrupted (names what is on disk)."""
    steps = []
    directory = storage.join(workdir, "checkpoints") if workdir else None
    if directory:
        try:
            steps = [int(n) for n in storage.listdir(directory) if n.isdigit()]  # committed only
        except (OSError, ImportError):  # a storage that cannot be listed: say nothing is known
            steps = []
    where = (f"latest checkpoint: step {max(steps)} in {directory}" if steps
             else "no checkpoint yet")
    return (f"{signal_name}: stopped during start-up, before training began; nothing needed "
            f"saving; {where}")


class GracefulStop:
    """Context manager installing the handlers (main thread only; elsewhere a no-op)."""

    def __init__(self, *, startup: bool = False):
        self.startup = startup
        self.requested = False
        self.signal_name: Optional[str] = None
        self._previous: dict = {}

    def _handle(self, signum, frame):
        del frame
        name = signal.Signals(signum).name
        if self.requested:
            sys.stderr.write(f"second {name}: exiting now without saving\n")
            sys.stderr.flush()
            os._exit(128 + signum)
        self.requested = True
        self.signal_name = name
        if self.startup:
            raise Interrupted(name)
        sys.stderr.write(f"{name}: finishing the current step, then saving a checkpoint "
                         f"(send it again to exit at once)\n")
        sys.stderr.flush()

    def running(self) -> None:
        """Start-up is over: from now on a signal only asks the loop to stop after the step."""
        self.startup = False

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in HANDLED:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc):
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous.clear()
        return False
