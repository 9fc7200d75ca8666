"""posjax.host_memory: the entry points start again, once, with glibc's huge-page tunable;
glibc's malloc_trim; a process's own peak RSS."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from posjax import host_memory


def _value(environ, mode="madvise", system="Linux", libc="glibc"):
    return host_memory.tunables_with_huge_pages(environ, mode, system, libc)


def test_tunable_is_added_once_and_keeps_the_users_other_tunables():
    assert _value({}) == "glibc.malloc.hugetlb=1"
    assert (_value({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
            == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1")
    # Already there (the re-exec itself, or the user's own value, even =0): leave it.
    assert _value({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}) is None
    assert _value({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}) is None


def test_nothing_happens_where_it_cannot_help_or_was_declined():
    assert _value({host_memory.OPT_OUT: "0"}) is None
    assert _value({}, mode="always") is None  # huge pages without asking
    assert _value({}, mode="never") is None
    assert _value({}, mode=None) is None  # no THP file: not Linux, or a kernel without THP
    assert _value({}, system="Darwin") is None
    assert _value({}, libc="") is None  # musl and others: no glibc tunables
    assert _value({host_memory.OPT_OUT: "1"}) == host_memory.TUNABLE


def test_thp_mode_reads_the_bracketed_choice(tmp_path):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert host_memory.thp_mode(str(f)) == "madvise"
    assert host_memory.thp_mode(str(tmp_path / "missing")) is None


def test_reexec_passes_the_same_arguments_and_environment_plus_the_tunable(monkeypatch):
    calls = []
    monkeypatch.setattr(host_memory, "thp_mode", lambda: "madvise")
    monkeypatch.setattr(host_memory.platform, "system", lambda: "Linux")
    monkeypatch.setattr(host_memory.platform, "libc_ver", lambda: ("glibc", "2.36"))
    environ = {"PATH": "/bin", "KEEP": "x"}
    done = host_memory.reexec_with_huge_pages(
        ["python", "train.py", "--config=configs/nezha.py"], environ,
        lambda exe, argv, env: calls.append((exe, argv, env)))
    assert done
    (exe, argv, env), = calls
    assert exe == sys.executable and argv == [sys.executable, "train.py",
                                              "--config=configs/nezha.py"]
    assert env == {"PATH": "/bin", "KEEP": "x", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    assert environ == {"PATH": "/bin", "KEEP": "x"}  # the caller's mapping is not changed
    calls.clear()
    assert not host_memory.reexec_with_huge_pages(["python", "train.py"], env, calls.append)
    assert not calls  # started again already: never a second time


@pytest.mark.skipif(host_memory.tunables_here({}) is None,
                    reason="the re-exec applies on Linux/glibc with THP mode 'madvise' only")
def test_a_real_program_starts_again_once_with_its_arguments():
    script = ("import os, sys\n"
              "from posjax import host_memory\n"
              "print('start', os.environ.get('GLIBC_TUNABLES'), flush=True)\n"
              "host_memory.reexec_with_huge_pages()\n"
              "print('args', sys.argv[1:])\n")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES",
                                                            host_memory.OPT_OUT)}
    out = subprocess.run([sys.executable, "-c", script, "a", "--b=1"], env=env, check=True,
                         capture_output=True, text=True).stdout.splitlines()
    assert out == ["start None", "start glibc.malloc.hugetlb=1", "args ['a', '--b=1']"]


@pytest.mark.skipif(host_memory.glibc_malloc_trim() is None, reason="glibc only")
def test_glibc_malloc_trim_is_callable_here():
    assert host_memory.glibc_malloc_trim()(0) in (0, 1)  # 1: memory was released


def test_peak_rss_is_the_processes_own_not_its_parents():
    """A child started from a parent holding 600 MiB reports its own peak (getrusage's
    ru_maxrss would report the parent's, carried across exec)."""
    held = np.ones(600 << 17)  # 600 MiB of float64, every page touched
    script = "from posjax import host_memory\nprint(host_memory.peak_rss_mib())"
    child = float(subprocess.run([sys.executable, "-c", script], check=True,
                                 capture_output=True, text=True).stdout)
    assert 1 < child < 300, child
    assert host_memory.peak_rss_mib() >= held.nbytes / 2**20
