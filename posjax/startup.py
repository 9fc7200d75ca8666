"""What every entry point (train.py, eval.py, the experiment drivers) does to its own process
first, in its `__main__` block, before jax allocates: `start()`.

1. Start again, once, with glibc's huge-page tunable where it applies (posjax/host_memory.py).
2. After every XLA compile, hand the heap pages the compiler freed back to the OS with glibc's
   malloc_trim(0). The compiler frees its working set when a compile ends, but glibc keeps
   freed pages inside its heap mapped, and a step's buffers, allocated afterwards as fresh
   mmaps, cannot reuse them: the peak counted both. The trim takes about 10 ms against a
   compile of a second; a ModernBERT training step at 2048 tokens peaked at 856-858 MiB
   instead of 934-955, step time within the machine's noise (bench/long_attention_peer.md).
Library users who call posjax from their own program can call `release_compiler_memory()`.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax

from posjax import host_memory

# jax's event at the end of every backend compile (a persistent-cache load included).
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

_trim_listener: Optional[Callable] = None


def release_compiler_memory(trim: Optional[Callable[[int], int]] = None) -> bool:
    """From now on, after every XLA compile in this process, return the heap pages the compiler
    freed. Once per process: later calls do nothing. Returns whether a listener is in place
    (not off Linux/glibc). `trim` replaces glibc's malloc_trim (tests)."""
    global _trim_listener
    if _trim_listener is not None:
        return True
    trim = trim or host_memory.glibc_malloc_trim()
    if trim is None:
        return False

    def after_compile(event: str, duration_secs: float, **kwargs) -> None:
        if event == COMPILE_EVENT:
            trim(0)

    jax.monitoring.register_event_duration_secs_listener(after_compile)
    _trim_listener = after_compile
    return True


def start() -> None:
    """Steps 1 and 2 of the module docstring (1 does not return when it starts again)."""
    host_memory.reexec_with_huge_pages()
    release_compiler_memory()
