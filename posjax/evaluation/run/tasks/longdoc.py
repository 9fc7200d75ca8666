"""longdoc: MLM accuracy and loss by position inside single long documents.

The rows are the evaluator's held-out rows of the length (posjax.data.heldout: one stream,
one fixed set of masks) that lie inside ONE document: rows that join documents are dropped,
so a score at position p had p tokens of the same document before it (the KJV books reach
~40k words; People's Daily articles are short, so at long lengths no row is left and the
cell is not_applicable). Positions are bucketed as in posjax.evaluation.run.metrics ([0, T),
[T, 2T), [2T, 4T), ...), and every bucket gets its own 95% bootstrap interval over documents
(rows of one book are correlated), from per-row-per-bucket sums.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from posjax.evaluation.run import batches as batches_lib
from posjax.evaluation.stats import intervals
from posjax.evaluation import methods
from posjax.evaluation.run import metrics
from posjax.evaluation.derive import seeds as seeds_lib


def evaluate(run, length: int, settings: batches_lib.Settings, record: dict, cell, params,
             scorer) -> dict:
    """The longdoc record (status 'ok'); NotApplicable when no row lies in one document."""
    base = batches_lib.rows(run, length, settings)
    keep = ~base.crosses
    if not keep.any():
        raise methods.NotApplicable(
            f"no held-out row of {length} tokens lies inside one document (corpus "
            f"{batches_lib.data_config(run, settings).data.corpus}); longdoc needs long "
            "documents such as the KJV books")
    arrays = {k: v[keep] for k, v in base.arrays.items()}
    cluster = base.cluster[keep]
    inputs = batches_lib.for_method(arrays, cell.window, False)
    edges = metrics.bucket_edges(run.trained_length, length)
    nb = len(edges) - 1
    per_batch = batches_lib.rows_per_batch(length, len(cluster), settings)
    sums = {k: [] for k in ("loss", "correct", "count")}  # each [rows, buckets]
    t0 = time.perf_counter()
    for part, real in batches_lib.batches(inputs, per_batch):
        out = jax.device_get(scorer(params, part))
        if int(out.dropped) > 0:
            raise RuntimeError("masked tokens fell outside the scored places (a posjax bug)")
        bucket = np.clip(np.searchsorted(edges, np.asarray(out.place), side="right") - 1, 0, nb - 1)
        for name, values in (("loss", out.loss), ("correct", out.correct), ("count", out.weight)):
            v = np.asarray(values, np.float64)[:real]
            b = bucket[:real]
            rows = np.zeros((real, nb))
            np.add.at(rows, (np.arange(real)[:, None].repeat(b.shape[1], 1), b), v)
            sums[name].append(rows)
    table = {k: np.concatenate(v) for k, v in sums.items()}
    clusters, unit = intervals.units({"cluster": cluster})

    def numbers(loss, correct, count):
        out = {"count": int(count.sum()), "correct": int(round(correct.sum())),
               "loss_sum": float(loss.sum())}
        for name, num, interval in (("accuracy", correct, intervals.proportion_interval),
                                    ("loss", loss, intervals.ratio_interval)):
            est, lo, hi = interval(num, count, clusters=clusters, seed=settings.seed)
            out.update({name: est, f"{name}_lo": lo, f"{name}_hi": hi})
        return out

    record["overall"] = dict(numbers(*(table[k].sum(1) for k in ("loss", "correct", "count"))),
                             rows=int(keep.sum()), clusters=int(np.unique(cluster).size),
                             resampled=unit, interval=intervals.rule_name(
                                 np.unique(cluster).size if clusters is not None
                                 else len(cluster)))
    record["buckets"] = [dict(bucket=metrics.bucket_label(lo, hi), start=lo, end=hi,
                              **numbers(table["loss"][:, b], table["correct"][:, b],
                                        table["count"][:, b]))
                         for b, (lo, hi) in enumerate(zip(edges[:-1], edges[1:]))]
    record["rows"] = {"loss": [float(f"{x:.7g}") for x in table["loss"].sum(1)],
                      "correct": [int(round(x)) for x in table["correct"].sum(1)],
                      "count": [int(round(x)) for x in table["count"].sum(1)],
                      "cluster": cluster.tolist()}
    record.update(n_seeds=1, seeds=[seeds_lib.config_seed(run.config)],
                  interval=record["overall"]["interval"])
    record.update(status="ok", dropped_rows=int((~keep).sum()),
                  wall_s=time.perf_counter() - t0, rows_per_batch=per_batch)
    return record
