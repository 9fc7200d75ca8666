"""Global batches of a row dataset: one global order cut into batches, this process's share.

Shared by the text pipeline (posjax.data.pipeline) and the image patches
(posjax.data.patches), so both resume and split over hosts the same way.
"""

from __future__ import annotations

from typing import Callable

from posjax.errors import ConfigError


def global_batches(ds, batch: int, rows: tuple[int, int] | None):
    """The infinite row dataset `ds` (one global order) cut into global batches of `batch`
    rows, of which this process keeps rows lo..hi-1 (`rows`; None = all)."""
    import grain

    lo, hi = (0, batch) if rows is None else (int(rows[0]), int(rows[1]))
    if not 0 <= lo < hi <= batch:
        raise ConfigError("rows", rows, f"(lo, hi) with 0 <= lo < hi <= data.batch_size={batch}")
    n = hi - lo
    if n != batch:
        # local row j = global row (j // n) * batch + lo + j % n
        global_rows = ds
        ds = grain.MapDataset.range(len(global_rows) // batch * n).map(
            lambda j: global_rows[(j // n) * batch + lo + j % n])
    ds = ds.batch(n, drop_remainder=True)
    return ds.to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=4))


def shuffled_batches(per_epoch: int, seed: int, build: Callable, batch: int,
                     rows: tuple[int, int] | None):
    """Rows 0..per_epoch-1 in a seeded order, reshuffled every epoch, made by
    `build(index, row)` (index counts rows drawn across epochs), cut by global_batches."""
    import grain

    ds = grain.MapDataset.range(per_epoch).shuffle(seed=int(seed)).repeat().map_with_index(build)
    return global_batches(ds, batch, rows)
