"""bench/alternate.py, the worker machinery of the peer benches: workers answer in turn, every
worker reports its peak RSS; bench/long_attention_peer.py's table reads its rows."""

from __future__ import annotations

import os
import sys

from bench import alternate, long_attention_peer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A worker whose n-th 'run k' answers k copies of n: the order of the calls shows in the times.
SCRIPT = ("import itertools\nfrom bench import alternate\ncalls = itertools.count()\n"
          "alternate.serve({'ready': True}, {'run': lambda k: dict(times=[next(calls)] * int(k))})")


def test_workers_alternate_and_report_peak_rss():
    workers = {name: alternate.Worker(name, [sys.executable, "-c", SCRIPT], dict(os.environ),
                                      ROOT) for name in ("a", "b")}
    try:
        assert all(w.read() == {"ready": True} for w in workers.values())
        times, last = alternate.alternate(workers, 2, "run 3")
        rss = workers["b"].ask("rss")["peak_rss_mib"]
    finally:
        for w in workers.values():
            w.close()
    assert times == {"a": [0, 0, 0, 1, 1, 1], "b": [0, 0, 0, 1, 1, 1]}
    assert last["a"] == {"times": [1, 1, 1]}
    assert 1 < rss < 10_000  # MiB of a small Python process


def test_table_row_ratios_and_parity():
    row = dict(layout="local", length=8192, kind="forward", attention="rows", compiler_heap="release",
               posjax=dict(s=2.0, cpu_s=3.0, rss_mib=900.0), torch=dict(s=5.0, cpu_s=6.0,
                                                                    rss_mib=1500.0),
               ratio=2.5, cpu_ratio=2.0, max_abs_diff=9.5e-7)
    line = long_attention_peer.table([row]).splitlines()[-1]
    assert line == ("| global every 3rd, window 128 | 8192 | forward | rows | 2.000 | 5.000 | "
                    "2.50x (2.00x) | 900/1500 | 9.5e-07 |")
