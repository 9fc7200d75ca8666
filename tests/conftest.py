"""Shared test setup: tests run on CPU unless the caller chose a platform, and every train.py /
eval.py subprocess of one pytest run (all xdist workers included) shares one persistent XLA
compilation cache, so the tiny config's train step compiles once per run, not once per test
module (tests/reliability/runner.py `session_cache`)."""

import os
import shutil
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")

CACHE_VARIABLE = "POSJAX_TEST_XLA_CACHE"


def pytest_configure(config):
    # The controller (or a plain run) makes the directory; xdist workers inherit the variable.
    if not hasattr(config, "workerinput") and CACHE_VARIABLE not in os.environ:
        os.environ[CACHE_VARIABLE] = tempfile.mkdtemp(prefix="posjax-test-xla-cache-")
        config._posjax_cache = os.environ[CACHE_VARIABLE]


def pytest_unconfigure(config):
    cache = getattr(config, "_posjax_cache", None)
    if cache:
        shutil.rmtree(cache, ignore_errors=True)
        os.environ.pop(CACHE_VARIABLE, None)
