"""Where the Pallas kernel (posjax.kernels) plugs into attention's choice of path.

The kernels sit above attention (they reuse its tile and band math), so attention cannot
import them: importing posjax.kernels registers them here instead. posjax.models imports
posjax.kernels, so every model, entry point and evaluation has the kernel; code that calls
`attend` directly with implementation='kernel' imports posjax.kernels itself.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from posjax.positions.base import Scheme


@dataclasses.dataclass(frozen=True)
class Kernel:
    """The kernel's entry (same keywords as attend, plus shard_axes) and what it can run."""

    flash_attention: Callable
    supports: Callable[[Optional[Scheme]], bool]  # computes this scheme's hooks exactly
    refusal: Callable[[Optional[Scheme]], Optional[str]]  # why it never can (a clause), or None


_REGISTERED: list[Kernel] = []


def register(kernel: Kernel) -> None:
    """Make `kernel` the one implementation='kernel' runs (posjax.kernels calls this)."""
    _REGISTERED[:] = [kernel]


def registered() -> Optional[Kernel]:
    """The registered kernel, or None when posjax.kernels has not been imported."""
    return _REGISTERED[0] if _REGISTERED else None
