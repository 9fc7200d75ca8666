"""posjax.startup: every entry point starts with huge pages and hands the compiler's freed heap
back after every compile."""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest

from posjax import startup


def test_every_entry_point_that_trains_or_evaluates_starts_with_huge_pages():
    """train.py, eval.py and the experiment drivers (python -m experiments.NAME) call the re-exec
    and the compiler-memory release in their __main__ block; a driver that did not would run
    its steps ~20% slower on CPU, and peak higher."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    experiments = os.path.join(root, "experiments")
    files = [os.path.join(root, "train.py"), os.path.join(root, "eval.py")] + [
        os.path.join(experiments, f) for f in sorted(os.listdir(experiments))
        if f.endswith(".py")]
    mains = [f for f in files if '__name__ == "__main__"' in open(f).read()]
    assert len(mains) >= 6
    for f in mains:
        main_block = open(f).read().split('if __name__ == "__main__":')[1]
        assert "startup.start()" in main_block, f


@pytest.fixture
def fresh_release(monkeypatch):
    """release_compiler_memory as in a new process; its listener is removed afterwards."""
    monkeypatch.setattr(startup, "_trim_listener", None)
    yield
    if startup._trim_listener is not None:
        jax.monitoring.unregister_event_duration_listener(startup._trim_listener)


def test_the_heap_is_trimmed_after_every_compile_and_not_otherwise(fresh_release):
    three, four = np.ones(3, np.float32), np.ones(4, np.float32)
    calls = []
    assert startup.release_compiler_memory(trim=calls.append)
    assert startup.release_compiler_memory(trim=calls.append)  # once: no second listener
    f = jax.jit(lambda x: x * 3 + 1)
    f(three).block_until_ready()
    assert calls == [0]  # one compile, one malloc_trim(0)
    f(three).block_until_ready()
    assert calls == [0]  # a cached executable is no compile
    f(four).block_until_ready()
    assert calls == [0, 0]
