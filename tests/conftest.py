"""Shared test setup: tests run on CPU unless the caller chose a platform; every train.py /
eval.py subprocess of one pytest run (all xdist workers included) shares one persistent XLA
compilation cache, so the tiny config's train step compiles once per run, not once per test
module (tests/reliability/runner.py `session_cache`); and the slowest test files start first,
so the xdist workers (pyproject.toml addopts) do not end on them one after another; and XLA
compiles the fast way: no LLVM optimizer, the older loop emitters (tests/reliability/runner.py
FAST_COMPILE)."""

import gc
import os
import shutil
import sys
import tempfile

import pytest

from tests.reliability.runner import FAST_COMPILE

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# train.py / eval.py start again once with glibc's huge-page tunable (posjax/host_memory.py),
# importing jax a second time: ~1 s of CPU per subprocess, for steps too small to gain from
# it. Test subprocesses skip it (a caller's own value is kept); tests/test_host_memory.py and
# tests/test_startup.py check the re-exec, and test_train_smoke.py's first run keeps it.
os.environ.setdefault("POSJAX_HUGE_PAGES", "0")
# Before anything imports jax: this process and its subprocesses compile the fast way
# (tests/reliability/runner.py FAST_COMPILE says why); a caller's own XLA_FLAGS come first and
# are kept.
_FAST = tuple(FAST_COMPILE.split())
os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *(
    f for f in _FAST if f.split("=")[0] not in os.environ.get("XLA_FLAGS", ""))]).strip()

from posjax import compilation_cache  # noqa: E402 - imports jax: after the platform and flags

CACHE_VARIABLE = "POSJAX_TEST_XLA_CACHE"
# Every writer of the session's cache bounds it the same way: jax keeps a per-entry access-time
# file only when the size is bounded, and a bounded writer (compilation_cache.enable) warns
# "Error writing persistent compilation cache entry" on entries an unbounded one left without
# it (the subprocesses that name JAX_COMPILATION_CACHE_DIR themselves). Subprocesses' jax reads
# it at import; in this process only enable() names a cache, with the same bound.
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(compilation_cache.MAX_BYTES))
# The collector of this process and its xdist workers (not of subprocesses): tracing allocates
# millions of short-lived objects, and at Python's default thresholds (700, 10, 10) a worker
# ran a full collection every few seconds over a heap of traced programs. Measured on
# tests/attention/test_attend.py + tests/positions/test_dape.py in one process: 4.6 s of 71 s
# in the collector (22 full passes) -> 0.9 s (1 pass), peak memory the same (~860 MB).
gc.set_threshold(10000, 20, 10)
HERE = os.path.dirname(os.path.abspath(__file__))
# Slowest first: each file's (a SHARED_FIXTURE_GROUPS group's: its files') wall time in a full
# run of the suite, longest first, so the xdist workers do not end on them one after another.
# Every other file keeps its place after. Measured: `--durations=0` of a full run on 2 cores,
# summed per file (per group); every unit over 20 s is listed.
SLOWEST_FIRST = (
    "evaluation/test_reliance_recovery.py",  # the evaluation-trained group
    "attention/test_attend.py",
    "test_readme_commands.py",
    "positions/test_path.py",
    "convert/test_extend.py",  # the convert-cases group
    "scale/test_scale_runs.py",
    "reliability/test_preemption.py",
    "test_train_smoke.py",
    "scale/test_compile_sharding.py",
    "models/test_tape_model.py",
    "training/test_algorithmic_train.py",
    "positions/test_dape.py",
    "evaluation/test_algorithmic_eval.py",
    "notebooks/test_notebooks.py",
    "positions/test_relative.py",
    "test_patches_smoke.py",
    "storage/test_gcs_workdir.py",
    "kernels/test_lowering_tpu.py",
    "models/test_pretraining.py",
    "evaluation/test_finished_runs.py",
    "positions/test_liere.py",
    "positions/test_stick_breaking.py",
    "scale/test_multihost_preemption.py",
    "reliability/test_data_inputs.py",
    "scale/test_startup_wait.py",
    "attention/test_attend_golden.py",
    "positions/test_small_linalg.py",
    "test_writer_lock.py",
    "reliability/test_nan.py",
    "positions/test_xl.py",
    "positions/test_deberta.py",
    "positions/test_absolute.py",
    "models/test_layers.py",
    "attention/test_map_logits.py",
    "positions/test_bias.py",
    "models/test_local_global.py",
    "attention/test_native.py",
    "positions/test_ssmax.py",
    "data/test_pose.py",
    "kernels/test_layout.py",
    "kernels/test_flash.py",
    "positions/test_rerope.py",
    "positions/test_rotary.py",
    "kernels/test_per_shard.py",
    "positions/test_recurrent.py",
)


# Files that share session fixtures (tests/evaluation/conftest.py: the trained tiny workdirs and
# the sweep over them, and fixtures.train_once; tests/convert/conftest.py: the converted models).
# A session fixture is built once per xdist worker, so with one work unit per file each worker
# that drew one of these files built them again; one work unit per group builds them once.
# Every file that asks for trained_workdir, nope_workdir, sweep or cells belongs here.
SHARED_FIXTURE_GROUPS = {
    "evaluation-trained": ("evaluation/test_reliance_recovery.py", "evaluation/test_sweep.py",
                           "evaluation/test_tasks_eval.py", "evaluation/test_continued.py",
                           "evaluation/test_memory_limit.py", "test_eval_smoke.py",
                           "evaluation/test_reuse.py", "evaluation/test_eta.py",
                           "evaluation/test_corpus_check.py", "evaluation/test_redraw.py",
                           "evaluation/test_source_archive.py"),
    "convert-cases": ("convert/test_extend.py", "convert/test_train_resume.py",
                      "convert/test_parity.py", "convert/test_errors.py",
                      "convert/test_modernbert.py", "convert/test_nomic.py",
                      "convert/test_to_hf.py"),
}
_GROUP_OF = {f"tests/{f}": g for g, files in SHARED_FIXTURE_GROUPS.items() for f in files}


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent without pytest-xdist
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with each SHARED_FIXTURE_GROUPS group as one work unit."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class GroupedFiles(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return _GROUP_OF.get(path, path)

    return GroupedFiles(config, log)


def pytest_collection_modifyitems(config, items):
    def rank(item):
        rel = os.path.relpath(str(item.path), HERE).replace(os.sep, "/")
        return SLOWEST_FIRST.index(rel) if rel in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep pytest's order


def pytest_configure(config):
    # The controller (or a plain run) makes the directory; xdist workers inherit the variable.
    if not hasattr(config, "workerinput") and CACHE_VARIABLE not in os.environ:
        os.environ[CACHE_VARIABLE] = tempfile.mkdtemp(prefix="posjax-test-xla-cache-")
        config._posjax_cache = os.environ[CACHE_VARIABLE]
    # train.py / eval.py subprocesses that do not name a cache themselves
    # (posjax/compilation_cache.py) use the session's, never the user's ~/.cache.
    os.environ.setdefault("POSJAX_COMPILATION_CACHE", os.environ[CACHE_VARIABLE])
    # Bytecode as Python keeps it by default (__pycache__ beside the sources, ignored by git):
    # where the environment turns .pyc writing off (PYTHONDONTWRITEBYTECODE), every xdist
    # worker compiled and assertion-rewrote all of tests/ and posjax/ again (~7 s of CPU each)
    # and every train.py / eval.py subprocess compiled posjax again (~0.5 s). The workers and
    # subprocesses inherit the environment without it. (A PYTHONPYCACHEPREFIX folder instead
    # would also recompile every installed package into it: a slower session.)
    if not hasattr(config, "workerinput") and os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
        sys.dont_write_bytecode = False
        config._posjax_bytecode_was_off = True


def pytest_unconfigure(config):
    cache = getattr(config, "_posjax_cache", None)
    if cache:
        shutil.rmtree(cache, ignore_errors=True)
        os.environ.pop(CACHE_VARIABLE, None)
    if getattr(config, "_posjax_bytecode_was_off", False):
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
