"""posjax.compilation_cache: the entry points keep compiled programs on disk for the next run."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap

import pytest

from posjax import compilation_cache as cc

# Slow tier: whole train.py / eval.py runs in subprocesses.
pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("environ, want", [
    ({"JAX_COMPILATION_CACHE_DIR": "/jax/own", cc.ENV: "/ignored"}, None),
    ({cc.ENV: "/here", "XDG_CACHE_HOME": "/xdg"}, "/here"),
    ({cc.ENV: " 0 "}, None),
    ({cc.ENV: "off"}, None),
    ({cc.ENV: "False"}, None),
    ({cc.ENV: ""}, None),
    ({"XDG_CACHE_HOME": "/xdg"}, "/xdg/posjax/xla"),
    ({"JAX_COMPILATION_CACHE_DIR": ""}, os.path.join(os.path.expanduser("~"), ".cache", "posjax",
                                                      "xla")),
])
def test_which_directory(environ, want):
    assert cc.cache_dir(environ) == want


def test_an_unusable_directory_means_no_cache(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert cc.enable({cc.ENV: str(blocker / "cache")}) is None
    assert cc.enable({cc.ENV: "off"}) is None


# One process compiles and writes the cache; a second, fresh process loads the program from it
# instead of compiling: jax's LRU cache rewrites an entry's "-atime" file on every read.
PROGRAM = textwrap.dedent("""
    import sys
    from posjax import compilation_cache
    assert compilation_cache.enable() == sys.argv[1]
    import jax, jax.numpy as jnp
    print(float(jax.jit(lambda x: jnp.sin(x).sum() * 3.0)(jnp.arange(7.0))))
""")


def test_a_second_process_reads_what_the_first_wrote(tmp_path):
    cache = str(tmp_path / "xla")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO,
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", **{cc.ENV: cache})
    env.pop("JAX_COMPILATION_CACHE_DIR", None)

    def run():
        r = subprocess.run([sys.executable, "-c", PROGRAM, cache], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        return r.stdout

    first = run()
    entries = glob.glob(os.path.join(cache, "jit__lambda-*-cache"))
    assert len(entries) == 1, os.listdir(cache)
    atime = entries[0][: -len("-cache")] + "-atime"
    written = open(atime, "rb").read()
    assert run() == first
    assert glob.glob(os.path.join(cache, "jit__lambda-*-cache")) == entries  # nothing compiled anew
    assert open(atime, "rb").read() != written  # the second process read the entry


def test_the_test_sessions_writers_share_one_cache_quietly(tmp_path):
    """A subprocess that names JAX_COMPILATION_CACHE_DIR itself (tests/reliability/runner.py)
    and an entry point's enable() write the same session cache: both bound it
    (tests/conftest.py), so the second finds the access-time file of every entry the first
    wrote and warns nothing."""
    cache = str(tmp_path / "xla")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO,
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    own = subprocess.run(
        [sys.executable, "-W", "error", "-c",
         "import jax, jax.numpy as jnp; jax.jit(lambda x: jnp.cos(x) * 2.0)(jnp.ones(3))"],
        env=dict(env, JAX_COMPILATION_CACHE_DIR=cache), capture_output=True, text=True,
        timeout=120)
    assert own.returncode == 0 and own.stderr == "", own.stderr
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    r = subprocess.run([sys.executable, "-W", "error", "-c", PROGRAM, cache],
                       env=dict(env, **{cc.ENV: cache}), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
