"""Where posjax keeps what it makes for this user and machine (compiled XLA programs, the CPU
attention kernel): `$XDG_CACHE_HOME/posjax`, by default `~/.cache/posjax`."""

from __future__ import annotations

import os
from typing import Mapping


def directory(environ: Mapping[str, str], name: str) -> str:
    """The cache directory `name` under posjax's (not created here)."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "posjax", name)
