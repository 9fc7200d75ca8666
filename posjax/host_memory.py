"""The entry points' host memory on Linux/glibc: transparent huge pages for the steps' buffers,
glibc's malloc_trim (posjax/startup.py uses both, and says why it trims), and `peak_rss_mib`
to measure the result. No jax here: a benchmark's torch worker imports it too.

## Huge pages

XLA:CPU allocates the buffers of a compiled step for every execution and frees them after it.
glibc serves allocations that large with fresh mmaps, so each step faults its whole working set
in again, 4 KiB at a time: a small BERT train step faulted ~150,000 pages per step, about a fifth
of its CPU time in the kernel (bench/README.md, training throughput). glibc's
`glibc.malloc.hugetlb=1` tunable has malloc ask for transparent huge pages (madvise), which cuts the faults ~250-fold.

Tunables are read when the process starts, so `reexec_with_huge_pages` starts the entry point
again, once, with the tunable added to GLIBC_TUNABLES (same interpreter, same arguments, same
process id). It does nothing when:
  - the platform is not Linux with glibc, or the kernel's THP mode is not 'madvise' ('always'
    gives huge pages without asking, 'never' refuses them);
  - GLIBC_TUNABLES already names glibc.malloc.hugetlb (the user's choice, or this re-exec);
  - POSJAX_HUGE_PAGES=0 (opt out).
Everything else about the process is unchanged: memory use is the same, the numbers are the same.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import sys
from typing import Callable, Mapping, MutableMapping, Optional, Sequence

TUNABLE = "glibc.malloc.hugetlb=1"
OPT_OUT = "POSJAX_HUGE_PAGES"
THP_MODE = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_mode(path: str = THP_MODE) -> Optional[str]:
    """The kernel's transparent-huge-page mode ('always', 'madvise', 'never'), None if unknown."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def tunables_with_huge_pages(environ: Mapping[str, str], mode: Optional[str],
                             system: str, libc: str) -> Optional[str]:
    """The GLIBC_TUNABLES value to start again with, or None to carry on as is."""
    if system != "Linux" or libc != "glibc" or mode != "madvise":
        return None
    if environ.get(OPT_OUT, "1") == "0":
        return None
    current = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in current:
        return None
    return f"{current}:{TUNABLE}" if current else TUNABLE


def tunables_here(environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """`tunables_with_huge_pages` for this machine (its platform, libc and THP mode)."""
    return tunables_with_huge_pages(environ, thp_mode(), platform.system(),
                                    platform.libc_ver()[0])


def reexec_with_huge_pages(argv: Optional[Sequence[str]] = None,
                           environ: MutableMapping[str, str] = os.environ,
                           execve: Callable = os.execve) -> bool:
    """Start this program again with the huge-page tunable when it applies (module docstring).
    Call first thing in an entry point's `__main__` block, before jax allocates anything.
    Returns False when nothing was done (with the real os.execve it does not return otherwise)."""
    value = tunables_here(environ)
    if value is None:
        return False
    argv = list(sys.orig_argv if argv is None else argv)
    env = dict(environ, GLIBC_TUNABLES=value)
    sys.stdout.flush()
    sys.stderr.flush()
    execve(sys.executable, [sys.executable, *argv[1:]], env)
    return True


def glibc_malloc_trim() -> Optional[Callable[[int], int]]:
    """glibc's malloc_trim, or None off Linux/glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def peak_rss_mib(status: str = "/proc/self/status") -> float:
    """This process's peak resident memory so far, MiB: Linux's VmHWM. Not getrusage's
    ru_maxrss, which Linux carries across exec: a child started from a large parent reports
    at least the parent's peak (resident at the fork) as its own."""
    try:
        with open(status) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB; bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024
