"""results.md describes each run as what it reads: text runs by token lengths and documents,
image runs (data.corpus='patches') by grids and images (synthetic cells; no training)."""

from posjax.evaluation.stats import intervals
from posjax.evaluation.report import report


def _cell(run, length, trained, correct):
    rows = {"correct": list(correct), "count": [10] * len(correct),
            "loss": [20.0] * len(correct), "cluster": list(range(len(correct)))}
    return {"status": "ok", "rows": rows, "overall": dict(intervals.summarize(rows), rows=5),
            "run": run, "scheme": "rope2d" if run == "img" else "rope", "step": 5,
            "trained_length": trained, "method": "as_is", "label": "as_is", "params": {},
            "length": length, "crossing_rows": 0, "buckets": [], "workdir": run,
            "causal": False, "seed": 0, "n_seeds": 1, "seeds": [0], "interval": "test",
            "wall_s": 0.0, "first_batch_s": None, "rows_per_batch": 1}  # a whole record


def _results(corpora):
    corpora = dict(corpora)
    runs, cells = {}, {}
    for run, corpus in corpora.items():
        runs[f"{run}@5"] = {"name": run, "workdir": run, "step": 5,
                            "scheme": "rope2d" if run == "img" else "rope",
                            "trained_length": 16, "causal": False,
                            "config": {"data": {"corpus": corpus}}}  # a whole record
        for length in (16, 64):
            cells[f"{run}@5|as_is|{length}"] = _cell(run, length, 16, [5, 6, 7, 4, 5])
    return {"settings": {"masked_tokens": 100, "seed": 0}, "runs": runs, "cells": cells}


def test_image_runs_are_described_by_grids_and_images():
    md = report.to_markdown(_results({"txt": "peoples_daily", "img": "patches"}))
    text, image = md.split("## img")[1].split("## txt")[::-1]
    assert "Text runs: one held-out stream" in md and "Image runs (data.corpus='patches')" in md
    assert "a larger grid scores other images" in md
    assert "(rope2d, trained at 4 x 4 = 16 patches, step 5, 1 seed)" in image
    assert "position reliance: not measured" in image
    assert "images per grid: 4 x 4: 5, 8 x 8: 5; scored patches per grid: 4 x 4: 50" in image
    assert "accuracy by grid:" in image and "| method | 4 x 4 | 8 x 8 |" in image
    # the text run next to it keeps the text wording
    assert "(rope, trained at 16, step 5, 1 seed)" in text and "| method | 16 | 64 |" in text
    assert "rows per length (rows crossing a document boundary)" in text
    assert "accuracy by length:" in text and "grid" not in text


def test_text_only_results_keep_the_text_intro():
    md = report.to_markdown(_results({"txt": "peoples_daily"}))
    assert md.split("\n")[2].startswith("One held-out stream per run")
    assert "Image runs" not in md and "grid" not in md


def test_plot_axis_names_grids_for_image_runs():
    from posjax.evaluation.report import plots

    lines = {kinds: plots._series(_results(kinds), set()) for kinds in (
        (("img", "patches"),), (("txt", "kjv"),), (("img", "patches"), ("txt", "kjv")))}
    named = {k: plots._xlabel(v) for k, v in lines.items()}
    assert "patches of a g x g grid" in named[(("img", "patches"),)]
    assert named[(("txt", "kjv"),)] == "evaluation length (tokens)"
    assert "patches for image runs" in named[(("img", "patches"), ("txt", "kjv"))]
