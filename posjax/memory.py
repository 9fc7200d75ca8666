"""Will a forward pass of this length fit? A memory estimate checked BEFORE anything is allocated.

An absurd length (`extend(100_000_000)`, `eval.py --lengths=100000000`) must be refused with one
line naming the limit, not found out by the out-of-memory killer after minutes of swapping.

    need = lambda n: memory.estimate_bytes(model_config, batch=1, length=n, params_bytes=p)
    memory.check_fits("max_length", 100_000_000, need)   # ConfigError naming the largest length

`estimate_bytes` is a deliberately simple upper-bound-ish model of an inference forward pass
(no gradients): the parameters, the O(L) activations alive at once in one layer (residual
stream, q/k/v/output, the MLP's hidden layer, position tables, the output copied to the host)
and the attention tile (a full [L, L] score matrix up to `REFERENCE_UP_TO` keys, where 'auto'
uses the reference attention; beyond, one block of rows (up to rows.BLOCK_ELEMENTS logits), where 'auto' runs the
rows path on CPU (the chunked tile and the kernel's are smaller), or one [block_q, block_k]
tile for 'chunked'; the 'reference' implementation: [L, L] at every length). XLA
frees a layer's activations before the next layer runs, so the layer count does not multiply
them. The budget is a fraction of what the machine (or the accelerator) has free now.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional

from posjax import schema
from posjax.attention import rows
from posjax.errors import ConfigError

# 'auto' attention uses the reference (full score matrix) up to this many keys, chunked beyond.
REFERENCE_UP_TO = 1024
# Share of the free memory a forward pass may plan to use (the rest: the runtime, fragmentation,
# the caller's own arrays, and the estimate's error).
BUDGET_FRACTION = 0.8
GIB = 1024 ** 3


def estimate_bytes(model, *, batch: int, length: int, params_bytes: int = 0,
                   output_width: Optional[int] = None, dtype_bytes: int = 4) -> int:
    """Bytes an inference forward pass of `batch` rows of `length` tokens needs (estimate).

    `model` is config.model (or any mapping of its fields; posjax.schema's defaults fill the
    ones it lacks). `output_width`: the last dimension of
    what is returned (default hidden; the vocabulary size for MLM logits). Monotone in batch
    and length; exact for nothing, meant to be within a small factor of the real peak.
    """
    m = schema.section_view(model, "model")
    hidden, heads = int(m.hidden), int(m.num_heads)
    head_dim = int(m.head_dim or hidden // max(heads, 1))
    mlp = int(m.mlp_dim)
    out_width = int(output_width or hidden)
    tokens = int(batch) * int(length)
    inner = heads * head_dim
    # residual + normed copy (2 hidden), q/k/v/attention output (4 inner), MLP in/out
    # (2 mlp), cos/sin or bias tables per position (2 head_dim), the int32 inputs (ids,
    # positions, mask, types), the output on device and its host copy (2 out_width)
    per_token = (2 * hidden + 4 * inner + 2 * mlp + 2 * head_dim + 2 * out_width) * dtype_bytes
    per_token += 4 * 4
    kind = str(m.attention)
    full = int(length) if kind == "reference" else min(int(length), REFERENCE_UP_TO)
    keys = int(length) if kind in ("auto", "rows") else min(int(m.block_k), length)
    chunk = min(int(m.block_q), length) * keys
    if kind in ("auto", "rows") and int(length) >= rows.FILL_FROM_KEYS:
        # a global layer's query block grows to fill rows.BLOCK_ELEMENTS logits (rows.query_block);
        # this bound on it stays monotone in batch and length where the evened-out block is not
        per_row = rows.BLOCK_ELEMENTS // max(int(batch) * heads, 1)
        chunk = max(chunk, min(per_row, int(length) * keys))
    # scores, probabilities and mask of one tile, in float32 whatever the compute dtype. 'auto'
    # past REFERENCE_UP_TO really needs only the chunk tile; counting the larger of the two
    # keeps the estimate monotone in the length (check_fits bisects on it), for a few MB.
    square = full * full if kind in ("reference", "auto") else 0
    tile = 3 * int(batch) * heads * max(square, chunk) * 4
    return int(params_bytes) + tokens * per_token + tile


def available_bytes() -> int:
    """Memory free for a new computation now: the accelerator's free memory when JAX already
    runs on one, else the host's available RAM (MemAvailable; psutil or sysconf elsewhere)."""
    jax = sys.modules.get("jax")  # never import JAX just to ask
    if jax is not None:
        try:
            device = jax.devices()[0]
            if device.platform != "cpu":
                stats = device.memory_stats() or {}
                if "bytes_limit" in stats:
                    return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        except Exception:  # noqa: BLE001 - no backend / no stats: fall back to the host
            pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    psutil = sys.modules.get("psutil")
    if psutil is not None:
        return int(psutil.virtual_memory().available)
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: do not refuse


def largest_fitting(need: Callable[[int], int], budget: int, upper: int) -> int:
    """The largest n in [0, upper] with need(n) <= budget (need is monotone); 0 if none."""
    lo, hi = 0, int(upper)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if need(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_fits(field: str, value: int, need: Callable[[int], int], *,
               available: Optional[int] = None) -> None:
    """ConfigError(field, value, ...) when `need(value)` bytes exceed the budget
    (BUDGET_FRACTION of `available`, default: available_bytes()). The message names the
    largest value that fits, the estimate and what is free. `need` maps a value of `field`
    (a length, a batch size) to bytes and must grow with it."""
    free = available_bytes() if available is None else int(available)
    budget = int(free * BUDGET_FRACTION)
    want = need(int(value))
    if want <= budget:
        return
    limit = largest_fitting(need, budget, int(value) - 1)
    raise ConfigError(
        field, value,
        f"<= {limit:,} on this machine (an estimated {want / GIB:,.1f} GiB is needed at "
        f"{int(value):,}; {free / GIB:,.1f} GiB is free and {BUDGET_FRACTION:.0%} of it may be "
        "planned for; posjax.memory)")
