"""The bootstrap (posjax.evaluation.intervals): coverage of a known p, clusters, pairing."""

from __future__ import annotations

import numpy as np
import pytest

from posjax.evaluation import intervals


def test_interval_covers_a_known_bernoulli_p_at_about_the_nominal_rate():
    rng = np.random.default_rng(0)
    p, rows, trials = 0.3, 150, 200
    hits = 0
    for t in range(trials):
        correct = (rng.random(rows) < p).astype(float)
        est, lo, hi = intervals.ratio_interval(correct, np.ones(rows), draws=300, seed=t)
        assert lo <= est <= hi
        hits += lo <= p <= hi
    # 95% nominal; the percentile bootstrap runs a little narrow at n=150: 88%..99%
    assert 0.88 <= hits / trials <= 0.99, hits / trials


def test_same_seed_same_interval():
    x = np.arange(20) % 3 == 0
    a = intervals.ratio_interval(x, np.ones(20), seed=4)
    assert a == intervals.ratio_interval(x, np.ones(20), seed=4)


def test_cluster_bootstrap_is_wider_for_correlated_clusters():
    rng = np.random.default_rng(1)
    clusters = np.repeat(np.arange(12), 25)  # 12 documents of 25 rows each
    p_doc = rng.uniform(0.1, 0.9, 12)[clusters]  # rows of one document share their p
    correct = (rng.random(clusters.size) < p_doc).astype(float)
    count = np.ones(clusters.size)
    _, lo_r, hi_r = intervals.ratio_interval(correct, count)
    _, lo_c, hi_c = intervals.ratio_interval(correct, count, clusters=clusters)
    assert hi_c - lo_c > 1.5 * (hi_r - lo_r)


def test_paired_difference():
    rng = np.random.default_rng(2)
    count = rng.integers(1, 5, 80).astype(float)
    a = np.minimum(count, rng.integers(0, 5, 80))
    assert intervals.difference_interval(a, a, count) == (0.0, 0.0, 0.0)
    b = np.maximum(a - 1, 0)
    est, lo, hi = intervals.difference_interval(a, b, count)
    assert est == pytest.approx((a.sum() - b.sum()) / count.sum()) and 0 < lo <= est <= hi
    rows_a = {"loss": a * 2, "correct": a, "count": count, "cluster": np.arange(80)}
    rows_b = dict(rows_a, correct=b)
    d = intervals.paired(rows_a, rows_b)
    assert d["accuracy"] == pytest.approx(est) and d["loss"] == 0.0
    s = intervals.summarize(rows_a)
    assert s["accuracy"] == a.sum() / count.sum() and s["rows"] == s["clusters"] == 80


def test_nothing_scored_gives_nan():
    est, lo, hi = intervals.ratio_interval(np.zeros(3), np.zeros(3))
    assert np.isnan(est) and np.isnan(lo) and np.isnan(hi)
