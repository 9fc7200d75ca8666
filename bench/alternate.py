"""Worker processes that a parent alternates: the machinery the peer benches share
(bench/peer_throughput.py, bench/long_attention_peer.py).

Each side of a comparison runs in its own process (so neither shares a thread pool, an
allocator or a compile cache with the other), announces itself with one JSON line when it is
ready, then answers commands, one JSON line each, over stdin/stdout. The parent runs one
worker at a time, so the two sides alternate blocks of work on the same cores and a change
of machine load between blocks touches both alike.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Callable

from posjax.host_memory import peak_rss_mib


def timed_calls(fn: Callable[[], object], n: int) -> list[tuple[float, float]]:
    """(wall seconds, process CPU seconds) of n calls of fn. CPU seconds count every thread
    of this process and not the waiting for a core, which a loaded machine adds to wall
    time; a thread pool that spins while it waits counts there too."""
    out = []
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        out.append((time.perf_counter() - t0, time.process_time() - c0))
    return out


def serve(ready: dict, handlers: dict[str, Callable[..., dict]]) -> None:
    """The worker side: print `ready`, then answer each stdin line 'name arg...' with
    handlers[name](*args) as one JSON line, until 'quit' or end of input. Every worker
    also answers 'rss' (peak_rss_mib)."""
    print(json.dumps(ready), flush=True)
    handlers = {"rss": lambda: dict(peak_rss_mib=peak_rss_mib()), **handlers}
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        print(json.dumps(handlers[cmd[0]](*cmd[1:])), flush=True)


class Worker:
    """The parent side of one worker process started with `cmd`."""

    def __init__(self, side: str, cmd: list[str], env: dict, cwd: str):
        self.side = side
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=cwd)

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.side} worker exited (code {self.proc.wait()})")
        return json.loads(line)

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        self.proc.wait()


def alternate(workers: dict[str, Worker], rounds: int, command: str, key: str = "times"
              ) -> tuple[dict[str, list], dict[str, dict]]:
    """`rounds` times, each worker in turn answers `command`: (its answers' `key` lists
    concatenated, its last answer) per side."""
    out: dict[str, list] = {name: [] for name in workers}
    last: dict[str, dict] = {}
    for _ in range(rounds):
        for name, w in workers.items():
            last[name] = w.ask(command)
            out[name] += last[name][key]
    return out, last
