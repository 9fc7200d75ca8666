"""95% intervals for evaluation numbers (pure numpy and scipy.special, no JAX).

An evaluation cell keeps, per row, the sums `loss`, `correct` and `count` of its scored
tokens, and the row's `cluster` (the document, or fixed span of one, that it lies in).
Accuracy is sum(correct) / sum(count), a ratio of sums; rows of one cluster are correlated,
so every interval treats CLUSTERS as the units. Which interval a number gets (the `interval`
string stored beside it, also in every table header):

  one training seed
    >= MIN_CLUSTERS clusters  'cluster bootstrap': resample clusters with replacement,
                              expanded percentile interval (DRAWS draws, seeded;
                              `expanded_level`)
    2 .. MIN_CLUSTERS - 1     'cluster jackknife t(G-1)': delete-one-cluster jackknife
                              standard error with t quantiles, df = clusters - 1 (a bootstrap
                              over a handful of clusters has few distinct resamples and runs
                              too narrow)
    1 cluster                 the same rules over ROWS (results.json's 'resampled' says
                              'rows'; too narrow when rows correlate)
  several seeds (runs that differ only in their training seed: the mean over seeds)
    >= MIN_CLUSTERS clusters  '2-level bootstrap': each draw resamples the seeds, then the
                              clusters (one resample of clusters for all seeds: every seed
                              scores the same held-out tokens, so clusters and seeds cross);
                              with >= 3 seeds the wider of it and 't over seed means'
    fewer                     'cluster jackknife + seed variance t(df)': the seed mean's
                              cluster jackknife variance plus the seeds' variance / S (the
                              seeds score the same tokens, so the two parts are separate),
                              t quantiles at Welch-Satterthwaite df; with >= 3 seeds the
                              wider of it and 't over seed means' (t of the per-seed values,
                              df S-1)
  0/1 outcomes (task exact match)
    'Wilson' score interval per cell (clopper_pearson is the exact alternative): 20/20 is
    [0.839, 1], never [1, 1]; a paired difference of two methods on the same rows is
    'Newcombe paired score' (Newcombe 1998, method 10: Wilson limits of each proportion
    combined with the correlation of the pairs).

Paired differences (a - b over the same rows, the same tokens) resample the SAME clusters
(and seeds, paired by seed index) for both sides. A proportion whose cluster interval
collapses to one point (every cluster at 0 or at 1) gets the Wilson interval over its
clusters instead, so no proportion's interval is ever zero-width; one whose t interval over
a few seed means reaches past 0 or 1 is cut at the bound, and its name says 'clipped to
[0, 1]'.

    est, lo, hi = ratio_interval(correct, count, clusters=cluster)          # accuracy
    est, lo, hi = difference_interval(correct_a, correct_b, count, clusters=cluster)
    summarize(rows) / paired(rows_a, rows_b)                  # one run's cell, a pair
    summarize_seeds([rows_s0, rows_s1, ...], seeds) / paired_seeds(...)     # seed groups

The same inputs give the same interval on every machine. A bootstrap draw that resamples no
scored token (possible only with few clusters) is dropped from the percentiles.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import special

DRAWS = 1000
LEVEL = 0.95
MIN_CLUSTERS = 20  # fewer clusters: jackknife with t quantiles, never a bootstrap
METRICS = (("accuracy", "correct"), ("loss", "loss"))  # (reported name, per-row sum)

BOOTSTRAP = "cluster bootstrap"
TWO_LEVEL = "2-level bootstrap"
SEED_T = "t over seed means"
JACKKNIFE_AND_SEEDS = "cluster jackknife + seed variance"
WILSON = "Wilson"
NEWCOMBE = "Newcombe paired score"


def jackknife_name(clusters: int) -> str:
    return f"cluster jackknife t({clusters - 1})"


def rule_name(units: int) -> str:
    """The interval ratio_interval gives over `units` clusters of one seed."""
    if units >= MIN_CLUSTERS:
        return BOOTSTRAP
    return jackknife_name(units) if units >= 2 else "none (one cluster)"


def t_quantile(df: float, level: float = LEVEL) -> float:
    return float(special.stdtrit(df, 0.5 + level / 2.0))


def z_quantile(level: float = LEVEL) -> float:
    return float(special.ndtri(0.5 + level / 2.0))


# ---- 0/1 outcomes ---------------------------------------------------------------------------

def wilson(successes: float, n: float, level: float = LEVEL) -> tuple[float, float, float]:
    """(k/n, lo, hi): the Wilson score interval; NaNs for n = 0."""
    if n <= 0:
        return float("nan"), float("nan"), float("nan")
    z = z_quantile(level)
    p = successes / n
    centre = (successes + z * z / 2.0) / (n + z * z)
    half = z * np.sqrt(successes * (n - successes) / n + z * z / 4.0) / (n + z * z)
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)
    hi = 1.0 if successes >= n else min(1.0, centre + half)
    return float(p), float(lo), float(hi)


def clopper_pearson(successes: int, n: int, level: float = LEVEL) -> tuple[float, float, float]:
    """(k/n, lo, hi): the exact (beta quantile) interval; NaNs for n = 0."""
    if n <= 0:
        return float("nan"), float("nan"), float("nan")
    alpha = 1.0 - level
    lo = 0.0 if successes == 0 else special.betaincinv(successes, n - successes + 1, alpha / 2)
    hi = 1.0 if successes == n else special.betaincinv(successes + 1, n - successes,
                                                       1 - alpha / 2)
    return float(successes / n), float(lo), float(hi)


def paired_proportions(x, y, level: float = LEVEL) -> tuple[float, float, float]:
    """mean(x) - mean(y) for paired 0/1 outcomes (x[i], y[i] on the same row) with Newcombe's
    paired score interval (1998, method 10). Never zero-width while there is a row."""
    x, y = np.asarray(x, bool), np.asarray(y, bool)
    n = x.size
    if n == 0 or y.size != n:
        return float("nan"), float("nan"), float("nan")
    a, b = float(np.sum(x & y)), float(np.sum(x & ~y))
    c, d = float(np.sum(~x & y)), float(np.sum(~x & ~y))
    p1, l1, u1 = wilson(a + b, n, level)
    p2, l2, u2 = wilson(a + c, n, level)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    if margins == 0:
        phi = 0.0
    else:  # Newcombe's phi, shrunk towards 0 by n/2 when positive (his continuity adjustment)
        num = a * d - b * c
        phi = (max(num - n / 2.0, 0.0) if num > 0 else num) / np.sqrt(margins)
    dl1, du1, dl2, du2 = p1 - l1, u1 - p1, p2 - l2, u2 - p2
    est = p1 - p2
    lo = est - np.sqrt(max(dl1 ** 2 - 2 * phi * dl1 * du2 + du2 ** 2, 0.0))
    hi = est + np.sqrt(max(du1 ** 2 - 2 * phi * du1 * dl2 + dl2 ** 2, 0.0))
    return float(est), float(max(lo, -1.0)), float(min(hi, 1.0))


# ---- ratios of sums over clusters (and seeds) -----------------------------------------------

@functools.lru_cache(maxsize=32)
def _counts(num_clusters: int, draws: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 95]))
    out = rng.multinomial(num_clusters, np.full(num_clusters, 1.0 / num_clusters), size=draws)
    out = out.astype(np.float64)
    out.flags.writeable = False
    return out


def resample_counts(num_clusters: int, draws: int = DRAWS, seed: int = 0) -> np.ndarray:
    """[draws, num_clusters] how often each cluster is drawn in each bootstrap sample."""
    return _counts(int(num_clusters), int(draws), int(seed))


def _combine(terms, w: np.ndarray, v: np.ndarray) -> np.ndarray:
    """sum_k sign_k * (seed mean, weighted by v [D, S], of ratio_k under cluster weights
    w [D, G]) -> [D]. terms: [(sign, num [S, G], den [S, G])]."""
    out = np.zeros(w.shape[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        for sign, num, den in terms:
            r = (w @ num.T) / (w @ den.T)  # [D, S]
            out = out + sign * (np.where(v > 0, r, 0.0) * v).sum(1) / v.sum(1)
    return out


def expanded_level(level: float, units: int) -> float:
    """The percentile level of Hesterberg's expanded percentile interval (2015): the level
    whose normal quantile is sqrt(n / (n - 1)) * t(n - 1). A plain percentile bootstrap runs
    narrow with few units (its variance is (n - 1) / n of the truth and it uses normal
    tails); at 20 clusters 95% becomes about 96.6%."""
    z = np.sqrt(units / (units - 1.0)) * t_quantile(units - 1, level)
    return float(2.0 * special.ndtr(z) - 1.0)


def _percentiles(samples: np.ndarray, level: float) -> tuple[float, float]:
    samples = samples[np.isfinite(samples)]
    if samples.size == 0:
        return float("nan"), float("nan")
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(samples, [tail, 100.0 - tail])
    return float(lo), float(hi)


def _t_interval(est: float, values: np.ndarray, se_scale: float, level: float):
    values = values[np.isfinite(values)]
    if values.size < 2:
        return float("nan"), float("nan")
    se = se_scale(values)
    half = t_quantile(values.size - 1, level) * se
    return est - half, est + half


def _seed_t(terms, point: float, g: int, num_seeds: int, level: float):
    per_seed = _combine(terms, np.ones((1, g)), np.eye(num_seeds)).ravel()
    return _t_interval(point, per_seed, lambda x: x.std(ddof=1) / np.sqrt(x.size), level)


def _jackknife(terms, point: float, g: int, num_seeds: int, level: float):
    """Fewer than MIN_CLUSTERS clusters: the seed mean's delete-one-cluster jackknife variance
    (which document sample), plus with several seeds the per-seed values' variance over S
    (which training run; every seed scores the same tokens, so that spread holds no document
    sampling), with t quantiles at the Welch-Satterthwaite degrees of freedom of the two parts
    (G - 1 with one seed)."""
    reps = _combine(terms, 1.0 - np.eye(g), np.ones((g, num_seeds)))
    reps = reps[np.isfinite(reps)]
    per_seed = _combine(terms, np.ones((1, g)), np.eye(num_seeds)).ravel()
    per_seed = per_seed[np.isfinite(per_seed)]
    name = jackknife_name(reps.size) if num_seeds == 1 else JACKKNIFE_AND_SEEDS
    if reps.size < 2 or (num_seeds > 1 and per_seed.size < 2):
        return float("nan"), float("nan"), name
    var_c = (reps.size - 1) / reps.size * np.sum((reps - reps.mean()) ** 2)
    var_s = per_seed.var(ddof=1) / per_seed.size if num_seeds > 1 else 0.0
    total = var_c + var_s
    parts = var_c ** 2 / (reps.size - 1) + (var_s ** 2 / (per_seed.size - 1) if var_s else 0.0)
    df = total ** 2 / parts if parts > 0 else float(reps.size - 1)
    half = t_quantile(df, level) * np.sqrt(total)
    return point - half, point + half, name if num_seeds == 1 else f"{name} t({df:.1f})"


def estimate(terms, *, draws: int = DRAWS, seed: int = 0, level: float = LEVEL) -> dict:
    """{value, lo, hi, interval} of sum_k sign_k * mean over seeds of ratio(num_k, den_k),
    each num/den given as [S seeds, G clusters] sums (see the module docstring for which
    interval)."""
    terms = [(s, np.asarray(n, np.float64), np.asarray(d, np.float64)) for s, n, d in terms]
    num_seeds, g = terms[0][1].shape
    nan = float("nan")
    point = float(_combine(terms, np.ones((1, g)), np.ones((1, num_seeds)))[0])
    if not np.isfinite(point):
        return {"value": nan, "lo": nan, "hi": nan, "interval": "none (nothing scored)"}
    if g >= MIN_CLUSTERS:
        w = resample_counts(g, draws, seed)
        v = resample_counts(num_seeds, draws, seed + 7919) if num_seeds > 1 \
            else np.ones((draws, 1))
        lo, hi = _percentiles(_combine(terms, w, v), expanded_level(level, g))
        name = TWO_LEVEL if num_seeds > 1 else BOOTSTRAP
    elif g >= 2:
        lo, hi, name = _jackknife(terms, point, g, num_seeds, level)
    else:
        return {"value": point, "lo": nan, "hi": nan, "interval": "none (one cluster)"}
    if num_seeds >= 3:  # few seeds: resampling or pooling 3 of them understates their spread
        t_lo, t_hi = _seed_t(terms, point, g, num_seeds, level)
        if t_hi - t_lo > hi - lo:
            lo, hi, name = t_lo, t_hi, SEED_T
    return {"value": point, "lo": lo, "hi": hi, "interval": name}


def _cluster_sums(values: list, clusters) -> list[np.ndarray]:
    """Per-cluster sums [G] of each per-row array (clusters None: every row its own)."""
    n = len(values[0])
    if clusters is None:
        return [np.asarray(v, np.float64) for v in values]
    clusters = np.asarray(clusters)
    if clusters.shape != (n,):
        raise ValueError(f"clusters has shape {clusters.shape}, rows {n}")
    _, index = np.unique(clusters, return_inverse=True)
    return [np.bincount(index, weights=np.asarray(v, np.float64)) for v in values]


def ratio_interval(num, den, *, clusters=None, draws: int = DRAWS, seed: int = 0,
                   level: float = LEVEL) -> tuple[float, float, float]:
    """(sum(num) / sum(den), lo, hi) over clusters (None: every row its own cluster):
    bootstrap with >= MIN_CLUSTERS of them, else jackknife t. NaNs when nothing is scored."""
    n, d = _cluster_sums([num, den], clusters)
    e = estimate([(1.0, n[None], d[None])], draws=draws, seed=seed, level=level)
    return e["value"], e["lo"], e["hi"]


def proportion_interval(num, den, *, clusters=None, draws: int = DRAWS, seed: int = 0,
                        level: float = LEVEL) -> tuple[float, float, float]:
    """ratio_interval of a proportion (correct / count), never zero-width: when every cluster
    (row, without clusters) sits at 0 or at 1 the interval is Wilson's over the clusters."""
    est, lo, hi = ratio_interval(num, den, clusters=clusters, draws=draws, seed=seed,
                                 level=level)
    if np.isfinite(est) and np.isfinite(lo) and hi - lo <= 0:
        units = np.unique(np.asarray(clusters)).size if clusters is not None else len(den)
        _, lo, hi = wilson(est * units, units, level)
    return est, lo, hi


def difference_interval(num_a, num_b, den, *, den_b=None, clusters=None, draws: int = DRAWS,
                        seed: int = 0, level: float = LEVEL) -> tuple[float, float, float]:
    """Paired ratio(a) - ratio(b) over the SAME rows: every resample (or deleted cluster)
    is the same for both. `den_b` defaults to `den` (the same scored tokens)."""
    den_b = den if den_b is None else den_b
    a, b, da, db = _cluster_sums([num_a, num_b, den, den_b], clusters)
    e = estimate([(1.0, a[None], da[None]), (-1.0, b[None], db[None])], draws=draws,
                 seed=seed, level=level)
    return e["value"], e["lo"], e["hi"]


def units(rows: dict):
    """(clusters or None, name): the rows' clusters when there are at least two of them;
    with one (one held-out book cut into rows) there is nothing to resample between, so rows
    are the units instead (named 'rows': too narrow when they correlate)."""
    if np.unique(np.asarray(rows["cluster"])).size >= 2:
        return rows["cluster"], "documents"
    return None, "rows"


def _seed_sums(rows_list: list[dict], key: str) -> tuple[np.ndarray, str, int]:
    """[S, G] per-cluster sums of `key` over the union of the seeds' clusters, the unit name
    and G. Rows are the units when all seeds' rows lie in one cluster."""
    clusters = [np.asarray(r["cluster"]) for r in rows_list]
    if np.unique(np.concatenate(clusters)).size < 2:
        sizes = {len(r["count"]) for r in rows_list}
        if len(sizes) != 1:
            raise ValueError("seeds with one cluster each must score the same rows")
        return np.asarray([np.asarray(r[key], np.float64) for r in rows_list]), "rows", \
            sizes.pop()
    labels, index = np.unique(np.concatenate(clusters), return_inverse=True)
    out = np.zeros((len(rows_list), labels.size))
    start = 0
    for s, r in enumerate(rows_list):
        part = index[start:start + len(r["count"])]
        out[s] = np.bincount(part, weights=np.asarray(r[key], np.float64), minlength=labels.size)
        start += len(r["count"])
    return out, "documents", labels.size


def _floor_proportion(out: dict, name: str, clusters: int, level: float) -> None:
    """A proportion whose interval is one point gets the Wilson interval over its clusters."""
    est, lo, hi = out[name], out[f"{name}_lo"], out[f"{name}_hi"]
    if np.isfinite(est) and np.isfinite(lo) and hi - lo <= 0 and clusters > 0:
        _, out[f"{name}_lo"], out[f"{name}_hi"] = wilson(est * clusters, clusters, level)
        out["interval"] = out[f"{name}_interval"] = \
            f"{out['interval']}, Wilson over {clusters} clusters (all equal)"


def _clip_proportion(out: dict, name: str) -> None:
    """A proportion's interval cut to [0, 1] (a t interval over 3 seed means of 0/20, 4/20
    and 11/20 reaches below 0), named so in its interval string."""
    lo, hi = out[f"{name}_lo"], out[f"{name}_hi"]
    if np.isfinite(lo) and np.isfinite(hi) and (lo < 0 or hi > 1):
        out[f"{name}_lo"], out[f"{name}_hi"] = max(lo, 0.0), min(hi, 1.0)
        out["interval"] = out[f"{name}_interval"] = f"{out[f'{name}_interval']}, clipped to [0, 1]"


def summarize_seeds(rows_list: list[dict], seeds: list, *, draws: int = DRAWS, seed: int = 0,
                    level: float = LEVEL) -> dict:
    """The mean over seeds of accuracy and loss, with intervals, from each seed's per-row
    sums {loss, correct, count, cluster}: {accuracy, accuracy_lo, accuracy_hi, loss, ...,
    count, rows, clusters, resampled, interval, n_seeds, seeds, per_seed: {accuracy: [...],
    loss: [...]}} (per_seed in the order of `seeds`)."""
    count, unit, g = _seed_sums(rows_list, "count")
    out = {"count": int(round(float(np.mean(count.sum(1))))), "rows": len(rows_list[0]["count"]),
           "clusters": g, "resampled": unit, "n_seeds": len(rows_list),
           "seeds": [int(s) for s in seeds], "per_seed": {}}
    for name, key in METRICS:
        num, _, _ = _seed_sums(rows_list, key)
        e = estimate([(1.0, num, count)], draws=draws, seed=seed, level=level)
        out.update({name: e["value"], f"{name}_lo": e["lo"], f"{name}_hi": e["hi"],
                    f"{name}_interval": e["interval"]})
        with np.errstate(invalid="ignore", divide="ignore"):
            out["per_seed"][name] = [float(x) for x in num.sum(1) / count.sum(1)]
    out["interval"] = out["accuracy_interval"]  # the headline number's
    _floor_proportion(out, "accuracy", g, level)
    _clip_proportion(out, "accuracy")
    return out


def summarize(rows: dict, *, seed_of_run: int = 0, draws: int = DRAWS, seed: int = 0,
              level: float = LEVEL) -> dict:
    """One run's cell: summarize_seeds of one seed (`seed_of_run`: its training seed)."""
    out = summarize_seeds([rows], [seed_of_run], draws=draws, seed=seed, level=level)
    out.pop("per_seed")
    return out


def paired_seeds(rows_a: list[dict], rows_b: list[dict], seeds: list, *, draws: int = DRAWS,
                 seed: int = 0, level: float = LEVEL) -> dict:
    """a - b for accuracy and loss, paired by seed (rows_a[i] with rows_b[i]) and by token
    (the same rows): {accuracy, accuracy_lo, ..., loss_hi, resampled, interval, n_seeds,
    seeds, per_seed}. ValueError when a pair does not score the same rows."""
    for a, b in zip(rows_a, rows_b, strict=True):
        if not np.array_equal(np.asarray(a["count"]), np.asarray(b["count"])):
            raise ValueError("paired differences need the same rows with the same scored tokens")
    out = _paired_sums(rows_a, rows_b, seeds, draws=draws, seed=seed, level=level)
    # Two cells that scored every token alike (a method that IS the baseline at this length,
    # e.g. hierarchical inside its table): the difference is exactly 0, not an interval.
    out["identical"] = all(np.array_equal(np.asarray(a[k]), np.asarray(b[k]))
                           for a, b in zip(rows_a, rows_b) for _, k in METRICS)
    return out


def paired_clusters_seeds(rows_a: list[dict], rows_b: list[dict], seeds, *, draws: int = DRAWS,
                          seed: int = 0, level: float = LEVEL) -> dict:
    """a - b as paired_seeds, for two cells that score the same tokens cut into DIFFERENT rows
    (one group of runs at two lengths): paired by seed and by cluster instead of by row, each
    side's ratio over its own counts. A row counts under the cluster of its first token, so
    where rows join documents some tokens change cluster between the sides and the pairing is
    approximate (the rows' `crossing_rows` say how many)."""
    return _paired_sums(rows_a, rows_b, seeds, draws=draws, seed=seed, level=level)


def _paired_sums(rows_a, rows_b, seeds, *, draws, seed, level) -> dict:
    """a - b paired by seed index and by cluster over the union of both sides' clusters."""
    n = len(rows_a)
    if n != len(rows_b):
        raise ValueError(f"{n} seeds against {len(rows_b)}: pairs need one cell each")
    sums = {key: _seed_sums(list(rows_a) + list(rows_b), key) for key in ("count", "correct",
                                                                         "loss")}
    count, unit, g = sums["count"]
    count_a, count_b = count[:n], count[n:]
    out = {"resampled": unit, "clusters": g, "n_seeds": n, "seeds": [int(s) for s in seeds],
           "per_seed": {}}
    for name, key in METRICS:
        na, nb = sums[key][0][:n], sums[key][0][n:]
        e = estimate([(1.0, na, count_a), (-1.0, nb, count_b)], draws=draws, seed=seed,
                     level=level)
        out.update({name: e["value"], f"{name}_lo": e["lo"], f"{name}_hi": e["hi"],
                    f"{name}_interval": e["interval"]})
        with np.errstate(invalid="ignore", divide="ignore"):
            out["per_seed"][name] = [float(x) for x in
                                     na.sum(1) / count_a.sum(1) - nb.sum(1) / count_b.sum(1)]
    out["interval"] = out["accuracy_interval"]  # the headline number's
    return out


def paired(rows_a: dict, rows_b: dict, *, draws: int = DRAWS, seed: int = 0,
           level: float = LEVEL) -> dict:
    """a - b for accuracy and loss over the same rows of one run: paired_seeds of one seed."""
    out = paired_seeds([rows_a], [rows_b], [0], draws=draws, seed=seed, level=level)
    for k in ("per_seed", "seeds", "n_seeds"):
        out.pop(k)
    return out
