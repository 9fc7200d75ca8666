"""A persistent XLA compilation cache for the entry points (train.py, eval.py).

XLA compiles every step anew in each process: on the 2-core CPU the main job's train, init and
eval programs cost ~10 s of its start-up, and an eval.py run after train.py compiles the same
eval program again. jax can keep compiled programs on disk, keyed by the program, the compile
options, the flags and the jax/jaxlib versions, so a run reuses only what is exactly the same
program. The entry points turn that cache on:

  - `JAX_COMPILATION_CACHE_DIR` set (by the user, or by posjax.launch.tpu for a bucket): jax
    already uses it; nothing here changes it.
  - else `POSJAX_COMPILATION_CACHE`: a directory, or 0 / off / false / no for no cache.
  - else `$XDG_CACHE_HOME/posjax/xla` (default `~/.cache/posjax/xla`).

jax caches only programs that took at least `jax_persistent_cache_min_compile_time_secs` (1 s by
default) to compile. The cache is bounded (MAX_BYTES, least recently used entries go first); a
directory that cannot be created or written means no cache, silently: the run is the same,
only its start-up is slower. Library users who import posjax turn it on themselves with
`enable()` or jax's own config.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

import jax

from posjax import user_cache

ENV = "POSJAX_COMPILATION_CACHE"
OFF = ("", "0", "off", "false", "no")
# The main job's three programs take ~0.7 MiB; a BERT-base step tens of MiB.
MAX_BYTES = 2 << 30


def cache_dir(environ: Mapping[str, str]) -> Optional[str]:
    """The directory the entry points should give jax, or None to leave jax as it is."""
    if environ.get("JAX_COMPILATION_CACHE_DIR"):
        return None
    if ENV in environ:
        value = environ[ENV].strip()
        return None if value.lower() in OFF else value
    return user_cache.directory(environ, "xla")


def _writable(path: str) -> bool:
    if "://" in path:  # a bucket (gs://...): jax's own file layer handles it
        return True
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def enable(environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """Point jax's persistent compilation cache at `cache_dir(environ)` if it is usable; call
    before the first compile. Returns the directory, or None when nothing was changed."""
    path = cache_dir(environ)
    if path is None or not _writable(path):
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return path
