"""Seeded bootstrap intervals for ratios of per-row sums (pure numpy, no JAX).

An evaluation cell keeps, per row, the sums `loss`, `correct` and `count` of its scored
tokens, and the row's `cluster` (the document it lies in). Accuracy is sum(correct) /
sum(count), a ratio of sums, so the bootstrap resamples whole CLUSTERS with replacement
(rows of one long document are correlated; where every row is its own cluster this is the
plain row bootstrap) and recomputes the ratio:

    est, lo, hi = ratio_interval(correct, count, clusters=cluster)            # accuracy
    est, lo, hi = difference_interval(correct_a, correct_b, count, clusters=cluster)
                                   # paired: the SAME resampled rows for both methods

Intervals are percentile intervals (default 95%, 1000 draws, seed 0): the same inputs give
the same interval on every machine. A draw that resamples no scored token (possible only with
a handful of clusters) is dropped from the percentiles.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

DRAWS = 1000
LEVEL = 0.95


def _cluster_sums(values: list[np.ndarray], clusters: Optional[np.ndarray]) -> list[np.ndarray]:
    n = len(values[0])
    if clusters is None:
        return [np.asarray(v, np.float64) for v in values]
    clusters = np.asarray(clusters)
    if clusters.shape != (n,):
        raise ValueError(f"clusters has shape {clusters.shape}, rows {n}")
    _, index = np.unique(clusters, return_inverse=True)
    return [np.bincount(index, weights=np.asarray(v, np.float64)) for v in values]


def resample_counts(num_clusters: int, draws: int = DRAWS, seed: int = 0) -> np.ndarray:
    """[draws, num_clusters] how often each cluster is drawn in each bootstrap sample."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 95]))
    return rng.multinomial(num_clusters, np.full(num_clusters, 1.0 / num_clusters), size=draws)


def _percentiles(samples: np.ndarray, level: float) -> tuple[float, float]:
    samples = samples[np.isfinite(samples)]
    if samples.size == 0:
        return float("nan"), float("nan")
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(samples, [tail, 100.0 - tail])
    return float(lo), float(hi)


def ratio_interval(num, den, *, clusters=None, draws: int = DRAWS, seed: int = 0,
                   level: float = LEVEL) -> tuple[float, float, float]:
    """(sum(num) / sum(den), lo, hi): the ratio and its bootstrap interval over clusters
    (None: every row is its own cluster). NaNs when nothing is scored."""
    num_c, den_c = _cluster_sums([num, den], clusters)
    total = den_c.sum()
    if total <= 0:
        return float("nan"), float("nan"), float("nan")
    counts = resample_counts(len(den_c), draws, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        samples = (counts @ num_c) / (counts @ den_c)
    return (float(num_c.sum() / total), *_percentiles(samples, level))


def difference_interval(num_a, num_b, den, *, den_b=None, clusters=None, draws: int = DRAWS,
                        seed: int = 0, level: float = LEVEL) -> tuple[float, float, float]:
    """Paired difference ratio(a) - ratio(b) over the SAME rows (same masks): each bootstrap
    sample resamples the rows once and evaluates both. `den_b` defaults to `den` (the same
    scored tokens, as for two methods on one set of rows)."""
    den_b = den if den_b is None else den_b
    a, b, da, db = _cluster_sums([num_a, num_b, den, den_b], clusters)
    if da.sum() <= 0 or db.sum() <= 0:
        return float("nan"), float("nan"), float("nan")
    counts = resample_counts(len(da), draws, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        samples = (counts @ a) / (counts @ da) - (counts @ b) / (counts @ db)
    return (float(a.sum() / da.sum() - b.sum() / db.sum()), *_percentiles(samples, level))


def summarize(rows: dict, *, draws: int = DRAWS, seed: int = 0, level: float = LEVEL) -> dict:
    """Accuracy and loss with intervals from a cell's per-row sums
    {loss, correct, count, cluster}: {accuracy, accuracy_lo, accuracy_hi, loss, loss_lo,
    loss_hi, count, rows, clusters}."""
    out = {"count": int(np.sum(rows["count"])), "rows": len(rows["count"]),
           "clusters": int(np.unique(rows["cluster"]).size)}
    for name, key in (("accuracy", "correct"), ("loss", "loss")):
        est, lo, hi = ratio_interval(rows[key], rows["count"], clusters=rows["cluster"],
                                     draws=draws, seed=seed, level=level)
        out.update({name: est, f"{name}_lo": lo, f"{name}_hi": hi})
    return out


def paired(rows_a: dict, rows_b: dict, *, draws: int = DRAWS, seed: int = 0,
           level: float = LEVEL) -> dict:
    """a - b for accuracy and loss over the same rows (clusters from `rows_a`):
    {accuracy, accuracy_lo, accuracy_hi, loss, loss_lo, loss_hi}. ValueError when the rows
    differ in number or in scored tokens per row (not the same rows)."""
    if len(rows_a["count"]) != len(rows_b["count"]) or not np.array_equal(
            np.asarray(rows_a["count"]), np.asarray(rows_b["count"])):
        raise ValueError("paired differences need the same rows with the same scored tokens")
    out = {}
    for name, key in (("accuracy", "correct"), ("loss", "loss")):
        est, lo, hi = difference_interval(rows_a[key], rows_b[key], rows_a["count"],
                                          clusters=rows_a["cluster"], draws=draws, seed=seed,
                                          level=level)
        out.update({name: est, f"{name}_lo": lo, f"{name}_hi": hi})
    return out
