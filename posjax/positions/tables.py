"""Ways to extend a learned position table of n trained rows to L > n positions (pure numpy).

Every method returns a NEW table of L rows, run as an ordinary learned table of L rows
(Learned.extend swaps it into the checkpoint's params). With p = 0..L-1:

  tile         row p = table[p mod n]: the trained rows repeated (row n+3 is row 3).
  interpolate  row p = the table linearly interpolated at x = p * (n-1) / (L-1):
               (1 - f) * table[floor(x)] + f * table[floor(x) + 1], f = x - floor(x).
               Row 0 is table[0] and row L-1 is table[n-1] exactly.
  stretch      row p = table[floor(p * (n-1) / (L-1) + 1/2)]: the nearest trained row of the
               same stretched coordinate (round half up), an index in [0, n-1]; 0 -> 0 and
               L-1 -> n-1.
  new_rows     rows 0..n-1 = the table, rows n..L-1 freshly initialised like BERT's table
               (truncated normal cut at 2 std, std 0.02, numpy seeded by `seed`): for
               continued training; zero-shot they are random positions.

(Su's `hierarchical` decomposition is a scheme of its own: posjax.positions.)
For L <= n no method changes anything: the model runs inside its trained range.
"""

from __future__ import annotations

import numpy as np

TABLE_METHODS = {
    "tile": "the trained rows repeated (row n+3 is row 3)",
    "interpolate": "the table linearly interpolated to L rows",
    "stretch": "the nearest trained row of the stretched coordinate",
    "new_rows": "rows past n freshly initialised like BERT's (for continued training)",
}
INIT_STD = 0.02


def source_rows(length: int, n: int, method: str) -> np.ndarray:
    """[L] float coordinates into the trained table (interpolate), or int rows (others;
    new_rows marks fresh rows with -1)."""
    p = np.arange(length)
    if method == "tile":
        return p % n
    if method == "interpolate":
        return p * (n - 1) / max(length - 1, 1)
    if method == "stretch":
        return np.floor(p * (n - 1) / max(length - 1, 1) + 0.5).astype(np.int64)
    if method == "new_rows":
        return np.where(p < n, p, -1)
    raise ValueError(f"unknown table method {method!r}; one of {', '.join(TABLE_METHODS)}")


def extend(table, length: int, method: str, *, seed: int = 0) -> np.ndarray:
    """`table` [n, E] (its n rows are the trained ones) -> [length, E] by `method`."""
    table = np.asarray(table)
    n = table.shape[0]
    if length <= n:
        return table[:length].copy()
    src = source_rows(length, n, method)
    if method == "interpolate":
        lo = np.floor(src).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        f = (src - lo)[:, None].astype(np.float64)
        out = (1.0 - f) * table[lo].astype(np.float64) + f * table[hi].astype(np.float64)
        return out.astype(table.dtype)
    if method == "new_rows":
        rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 17]))
        fresh = rng.standard_normal((length - n, table.shape[1]))
        while np.any(np.abs(fresh) > 2):  # truncated normal: redraw outside 2 std
            bad = np.abs(fresh) > 2
            fresh[bad] = rng.standard_normal(int(bad.sum()))
        return np.concatenate([table, (INIT_STD * fresh).astype(table.dtype)])
    return table[src].copy()
