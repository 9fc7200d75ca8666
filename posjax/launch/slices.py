"""Cloud TPU slice shapes the pod launcher knows: workers (TPU VM hosts), chips per worker and
the TPU VM runtime image of each accelerator type.

Sources: Cloud TPU docs, "TPU versions" pages (v4, v5e, v5p, v6e): v4 and v5p names count
TensorCores (2 per chip), v5e (v5litepod) and v6e names count chips; a multi-host slice has 4
chips per host, a single-host v5e/v6e slice up to 8.
"""

from __future__ import annotations

import dataclasses

from posjax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Slice:
    name: str  # the accelerator type, e.g. 'v4-32'
    chips: int
    workers: int
    runtime: str  # --runtime-version of the TPU VM image

    @property
    def chips_per_worker(self) -> int:
        return self.chips // self.workers


_RUNTIME = {"v4": "tpu-ubuntu2204-base", "v5litepod": "v2-alpha-tpuv5-lite",
            "v5p": "v2-alpha-tpuv5", "v6e": "v2-alpha-tpuv6e"}


def _table() -> dict[str, Slice]:
    out = {}

    def add(family: str, number: int, chips: int, per_host: int):
        name = f"{family}-{number}"
        out[name] = Slice(name, chips, max(1, chips // per_host), _RUNTIME[family])

    for family in ("v4", "v5p"):
        for n in (8, 16, 32, 64, 128, 256, 512):  # TensorCores; 2 per chip, 4 chips per host
            add(family, n, n // 2, 4)
    for family in ("v5litepod", "v6e"):
        for n in (1, 4, 8):  # one host
            add(family, n, n, 8)
        for n in (16, 32, 64, 128, 256):  # chips, 4 per host
            add(family, n, n, 4)
    return out


SLICES = _table()


def get(name: str) -> Slice:
    """The slice named `name`; ConfigError listing the known ones otherwise."""
    if name not in SLICES:
        raise ConfigError("slice", name, f"one of {', '.join(SLICES)}")
    return SLICES[name]
