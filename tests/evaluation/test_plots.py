"""The figures of an evaluation, drawn from small synthetic results dicts (no model, no JAX
compile): the ranking's order, labels, multiples and reference band; not-applicable cells
marked with a legend entry; a tick at every evaluated length; distinct colours; data-driven
task y limits; titles that do not overlap; the paired-difference plot; the redraw command."""

from __future__ import annotations

import json
import os

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb

from posjax.evaluation.report import plots
from posjax.evaluation.results import results_file
from posjax.evaluation.report.figures import curves, differences, ranking, style
from posjax.evaluation.report.figures.lines import (baseline_differences, mlm_lines, seeds,
                                                    task_lines)
from posjax.evaluation.report.tasks import plots as task_plots

METHODS = ("as_is", "linear", "ntk", "dynamic_ntk", "yarn", "llama3", "rerope",
           "leaky_rerope")


def _cell(run, label, length, acc, *, trained=64, status="ok", half=0.01, position=None,
          task=None, **extra):
    c = {"run": run, "label": label, "method": label, "params": {}, "length": length,
         "trained_length": trained, "scheme": position or run, "status": status, "seed": 0,
         "step": 1, "causal": False, "workdir": run}
    if status == "ok":
        metric = "exact" if task and task != "longdoc" else "accuracy"
        c["overall"] = {metric: acc, f"{metric}_lo": acc - half, f"{metric}_hi": acc + half,
                        "loss": 5 - acc, "loss_lo": 4.9 - acc, "loss_hi": 5.1 - acc,
                        "count": 10, "correct": 3, "loss_sum": 50.0, "rows": 2, "clusters": 2,
                        "resampled": "rows"}
        c.update(rows={"loss": [], "correct": [], "count": [], "cluster": []}, buckets=[],
                 crossing_rows=0, n_seeds=1, seeds=[0], interval="test", wall_s=0.0,
                 first_batch_s=None, rows_per_batch=1)
    else:
        c["reason"] = "not applicable here"
    if task:
        c["task"] = task
        c["depths"] = [{"depth": 0.5, "exact": acc}] if status == "ok" else []
    c.update(extra)
    return c


def _results(cells: list[dict], section: str = "cells", **more) -> dict:
    keyed = {f"{c['run']}@1|{c['label']}|L={c['length']}|{c.get('task', '')}": c
             for c in cells}
    runs = {f"{c['run']}@1": {"name": c["run"], "workdir": c["run"], "step": 1,
                              "scheme": c["scheme"], "trained_length": c["trained_length"],
                              "causal": False, "config": {"position": {"name": c["scheme"]}}}
            for c in cells}
    versions = dict.fromkeys(("python", "jax", "flax", "numpy", "backend"), "test")
    return dict({"schema": results_file.SCHEMA, "created": "2026-01-01T00:00:00Z",
                 "versions": dict(versions, posjax_commit=None), "settings": {}, "runs": runs,
                 section: keyed, "cells": keyed if section == "cells" else {}}, **more)


def _canvas(fig):
    FigureCanvasAgg(fig).draw()
    return fig


def _legend_texts(fig) -> list[str]:
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    return [t.get_text() for lg in legends for t in lg.get_texts()]


def _row_labels(ax) -> list[str]:
    """Tick labels of a ranking panel, top row first."""
    ticks = sorted(zip(ax.get_yticks(), ax.get_yticklabels()), key=lambda t: -t[0])
    return [label.get_text() for _, label in ticks]


def test_ranking_sorts_best_first_and_names_seeds():
    cells = [_cell(run, "as_is", n, acc) for run, acc in (("a", 0.30), ("b", 0.50), ("c", 0.40))
             for n in (64, 128)]
    cells[-1]["n_seeds"], cells[-1]["seeds"] = 3, [0, 1, 2]  # c at L=128: three seeds
    fig = ranking.draw(mlm_lines(_results(cells)), "accuracy", "accuracy")
    (ax,) = fig.axes
    assert _row_labels(ax) == ["b / as_is (1 seed)", "c / as_is (3 seeds)",
                               "a / as_is (1 seed)"]
    assert ax.get_title() == "2x the training length (L=128)"
    # an interval bar per evaluated row: the errorbar's x extent is the stored interval
    bars = [c for c in ax.collections if len(c.get_segments()) == 1]
    extents = sorted(tuple(round(v, 6) for v in seg[:, 0]) for b in bars
                     for seg in b.get_segments())
    assert extents == [(0.29, 0.31), (0.39, 0.41), (0.49, 0.51)]


def test_ranking_panels_sit_at_the_evaluated_multiples():
    cells = [_cell("r", "as_is", n, 0.3) for n in (64, 256, 1024)]
    lines = mlm_lines(_results(cells))
    parts = ranking.panels(lines)
    assert [(m, [row.length for row in rows]) for m, rows in parts] == [(4, [256]), (16, [1024])]
    assert ranking.title(*parts[0]) == "4x the training length (L=256)"
    assert ranking.draw(lines[:0], "accuracy", "accuracy") is None
    # more multiples than panels: the shortest, the longest and the one nearest their middle
    cells = [_cell("r", "as_is", 64 * m, 0.3) for m in (1, 2, 3, 4, 8, 16, 64)]
    assert [m for m, _ in ranking.panels(mlm_lines(_results(cells)))] == [2, 16, 64]
    # a run trained at another length takes its nearest evaluated length, named as such
    cells = [_cell("a", "as_is", n, 0.3) for n in (64, 128)]
    cells += [_cell("b", "as_is", n, 0.3, trained=96) for n in (96, 384)]
    rows = dict(ranking.panels(mlm_lines(_results(cells))))[2]
    assert [r.length for r in rows] == [128, 384]
    assert ranking.title(2, rows[1:]) == ("2x the training length: not evaluated for this "
                                          "run; nearest L=384 (4x)")


def test_ranking_draws_the_nope_band_and_leaves_out_not_applicable_rows():
    cells = [_cell("rope", "as_is", n, 0.3) for n in (64, 128)]
    cells += [_cell("nope", "as_is", n, 0.13, position="none") for n in (64, 128)]
    cells += [_cell("learned", "as_is", 64, 0.2),
              _cell("learned", "as_is", 128, None, status="not_applicable")]
    fig = ranking.draw(mlm_lines(_results(cells)), "accuracy", "accuracy")
    (ax,) = fig.axes
    assert _row_labels(ax) == ["rope / as_is (1 seed)", "nope / as_is (1 seed)"]
    texts = _legend_texts(fig)
    assert style.NA_LABEL not in texts
    assert any(t.startswith("no positions (nope / as_is)") for t in texts)
    bands = [p for p in ax.patches if p.get_label().startswith("no positions")]
    assert len(bands) == 1
    xs = bands[0].get_x(), bands[0].get_x() + bands[0].get_width()
    assert xs == pytest.approx((0.12, 0.14))
    assert not [ln for ln in ax.lines if ln.get_marker() == "x"]
    # without a NoPE run there is no reference band
    alone = ranking.draw(mlm_lines(_results(cells[:2])), "accuracy", "accuracy")
    assert not any(t.startswith("no positions") for t in _legend_texts(alone))


def test_methods_that_apply_nowhere_are_named_not_drawn(tmp_path):
    cells = [_cell(run, "as_is", n, 0.3) for run in ("nezha", "rope") for n in (64, 128)]
    cells += [_cell("rope", "yarn", n, 0.35) for n in (64, 128)]
    cells += [_cell("nezha", m, n, None, status="not_applicable") for m in ("yarn", "ntk")
              for n in (64, 128)]
    results = _results(cells)
    note = plots.not_applicable_note(mlm_lines(results))
    assert note == "not applicable (not drawn; reasons in results.md): nezha: ntk, yarn"
    plots.write_all(str(tmp_path), results)
    fig = curves.draw([ln for ln in mlm_lines(results) if ln.cells],
                      [(curves.plain("accuracy"), "accuracy")], "t", xlabel="length", note=note)
    assert fig._suptitle.get_text().endswith("\n" + note)
    assert "nezha / yarn" not in _legend_texts(fig)
    assert not [ln for ax in fig.axes for ln in ax.lines if ln.get_marker() == "x"]


def test_a_method_and_its_logn_twin_share_a_panel():
    labels = ["as_is", "as_is+logn", "ntk", "ntk+logn", "yarn", "yarn+logn", "rerope",
              "rerope+logn"]
    cells = [_cell("rope", lb, n, 0.3 + 0.01 * i) for i, lb in enumerate(labels)
             for n in (64, 128)]
    parts = curves.panels(mlm_lines(_results(cells)))
    assert [[ln.label for ln in part] for _, part, _ in parts] == [labels[:6], labels[:2] + labels[6:]]


def test_not_applicable_cells_get_a_marker_and_a_legend_entry():
    cells = [_cell("rope", "as_is", n, 0.3) for n in (64, 128, 256)]
    cells += [_cell("rope", "ntk", 64, 0.3),
              _cell("rope", "ntk", 128, None, status="not_applicable"),
              _cell("rope", "ntk", 256, None, status="not_applicable")]
    lines = mlm_lines(_results(cells))
    fig = curves.draw(lines, [(curves.plain("accuracy"), "accuracy")], "t", xlabel="length")
    ax = fig.axes[0]
    marks = [ln for ln in ax.lines if ln.get_marker() == "x"]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [128, 256]
    ntk = next(ln for ln in ax.lines if ln.get_label() == "rope / ntk")
    assert marks[0].get_color() == ntk.get_color()
    assert style.NA_LABEL in _legend_texts(fig)
    # a line with no evaluated cell at all is still in the legend, with its marks
    cells += [_cell("rope", "yarn", n, None, status="not_applicable") for n in (64, 128)]
    fig = curves.draw(mlm_lines(_results(cells)), [(curves.plain("accuracy"), "accuracy")],
                      "t", xlabel="length")
    assert "rope / yarn" in _legend_texts(fig)
    assert len([ln for ln in fig.axes[0].lines if ln.get_marker() == "x"]) == 2


def test_every_evaluated_length_has_a_tick_label():
    lengths = (64, 192, 512, 1000)
    cells = [_cell(f"r{i}", "as_is", n, 0.3 + 0.01 * i) for i in range(9) for n in lengths]
    for lines in (mlm_lines(_results(cells[:8])), mlm_lines(_results(cells))):
        fig = curves.draw(lines, [(curves.plain("accuracy"), "accuracy")], "t",
                          xlabel="length")
        for ax in [a for a in fig.axes if a.get_visible()]:
            assert [t.get_text() for t in ax.get_xticklabels()] == [str(n) for n in lengths]


def test_lines_of_one_axes_have_distinct_legible_colours():
    runs = [f"run{i:02d}" for i in range(3)]
    cells = [_cell(run, m, n, 0.3) for run in runs for m in METHODS for n in (64, 128)]
    cells += [_cell(f"single{i}", "as_is", n, 0.2) for i in range(8) for n in (64, 128)]
    fig = curves.draw(mlm_lines(_results(cells)), [(curves.plain("accuracy"), "accuracy")],
                      "t", xlabel="length")
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 3 * 2 + 2  # each run split in two, the 8 single runs in two
    for ax in panels:
        drawn = [ln for ln in ax.lines if not ln.get_label().startswith("_")]
        assert 1 < len(drawn) <= curves.MAX_PER_AXES
        colours = [to_rgb(ln.get_color()) for ln in drawn]
        assert len(set(colours)) == len(colours)
        for r, g, b in colours:  # no pale colour, no grey
            assert min(r, g, b) < 0.45 and not (r == g == b != 0)
    # the run's first method is the reference in each of its panels
    assert [ax.get_legend().get_texts()[0].get_text() for ax in panels[:2]] == ["as_is"] * 2
    assert all(to_rgb(c) != (0.85, 0.85, 0.85) for c in style.PALETTE)


def test_titles_do_not_overlap_the_panels():
    cells = [_cell(f"a_rather_long_run_name_{i}", "as_is", n, 0.3) for i in range(20)
             for n in (64, 128, 256)]
    fig = _canvas(curves.draw(mlm_lines(_results(cells)),
                              [(curves.plain("accuracy"), "accuracy")],
                              "a long suptitle " * 6, xlabel="length"))
    renderer = fig.canvas.get_renderer()
    top = fig._suptitle.get_window_extent(renderer)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    for ax in panels:
        for box in (ax.title.get_window_extent(renderer), ax.get_window_extent(renderer),
                    ax.get_legend().get_window_extent(renderer)):
            assert not top.overlaps(box)
    titles = [ax.title.get_window_extent(renderer) for ax in panels]
    boxes = [ax.get_window_extent(renderer) for ax in panels]
    legends = [ax.get_legend().get_window_extent(renderer) for ax in panels]
    assert not any(t.overlaps(b) for t in titles for b in boxes)
    assert not any(lg.overlaps(b) for lg in legends for b in boxes + titles)
    assert len({round(b.y0) for b in boxes}) == 2  # two rows of panels


def test_task_y_axis_fits_the_data():
    cells = [_cell(run, "as_is", n, acc, task="passkey", half=0.02)
             for run, acc in (("a", 0.40), ("b", 0.50)) for n in (64, 128)]
    results = _results(cells, section="tasks")
    lines = task_lines(results, "passkey")
    fig = curves.draw(lines, [(curves.plain("exact"), "exact")], "t", xlabel="length",
                      clip=(-0.02, 1.02))
    lo, hi = fig.axes[0].get_ylim()
    assert 0.3 < lo <= 0.38 and 0.52 <= hi < 0.6


def test_task_figures_are_written(tmp_path):
    cells = [_cell(run, "as_is", n, acc, task="passkey")
             for run, acc in (("a", 0.40), ("b", 0.50)) for n in (64, 128)]
    names = {os.path.basename(p) for p in task_plots.write_all(str(tmp_path),
                                                                _results(cells, "tasks"))}
    assert names == {"task_passkey_vs_length.png", "ranking_passkey.png",
                     "heatmap_passkey_a_as_is.png", "heatmap_passkey_b_as_is.png"}


def test_differences_plot_bands_and_zero_line():
    cells = [_cell("rope", m, n, acc) for m, acc in (("as_is", 0.3), ("ntk", 0.32))
             for n in (64, 128, 256)]
    results = _results(cells)
    diffs = {k: {"baseline": "as_is", "accuracy": 0.02, "accuracy_lo": 0.01,
                 "accuracy_hi": 0.03} for k, c in results["cells"].items()
             if c["label"] == "ntk"}
    fig = differences.draw(mlm_lines(results), diffs)
    ax = fig.axes[0]
    (line,) = [ln for ln in ax.lines if ln.get_label() == "rope / ntk"]
    assert list(line.get_xdata()) == [64, 128, 256] and set(line.get_ydata()) == {0.02}
    zero = [ln for ln in ax.lines if list(ln.get_ydata()) == [0, 0]]
    assert zero and zero[0].get_color() == "black"
    assert len(ax.collections) == 1  # the interval band
    assert differences.draw(mlm_lines(results), {}) is None


def test_seeds_read_the_cell_and_a_runs_not_applicable_cell_is_one_seed():
    assert seeds({"n_seeds": 3, "seeds": [0, 1, 2], "interval": "t over seed means",
                  "overall": {}}) == (3, (0, 1, 2), "t over seed means")
    assert seeds({"n_seeds": 2, "seeds": [4, 5], "interval": None}).text() == "2 seeds"
    assert seeds({"status": "not_applicable", "seed": 4}) == (1, (), None)


def test_redraw_command(tmp_path, capsys):
    cells = [_cell(run, "as_is", n, acc) for run, acc in (("a", 0.3), ("b", 0.4))
             for n in (64, 128)]
    src = tmp_path / "src"
    src.mkdir()
    # a finished folder: its derived sections are written (a mid-sweep one is derived first)
    (src / "results.json").write_text(json.dumps(_results(cells, seed_cells={})))
    assert plots.main([str(src), "--out", str(tmp_path / "out")]) == 0
    assert sorted(os.listdir(tmp_path / "out")) == ["accuracy_vs_length.png", "ranking.png"]
    capsys.readouterr()
    assert plots.main([str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "results_dir=" in err and "results.json" in err


def test_a_training_length_outside_the_evaluated_ones_stays_on_the_axes(tmp_path, recwarn):
    # a continued-training run: trained at 16, evaluated at 32 only
    lines = mlm_lines(_results([_cell("tiny", "tile", 32, 0.1, trained=16)]))
    fig = _canvas(curves.draw(lines, [(curves.plain("accuracy"), "accuracy")], "t",
                              xlabel="length"))
    lo, hi = fig.axes[0].get_xlim()
    assert lo < 16 < 32 < hi
    assert not [w for w in recwarn if "constrained_layout" in str(w.message)]


def test_curves_say_how_many_seeds():
    cells = [_cell(run, "as_is", n, 0.3) for run in ("a", "b") for n in (64, 128)]
    fig = curves.draw(mlm_lines(_results(cells)), [(curves.plain("accuracy"), "accuracy")],
                      "title", xlabel="length")
    assert fig._suptitle.get_text() == "title, 1 seed per point"
    for c in cells[:2]:
        c["n_seeds"] = 3
    fig = curves.draw(mlm_lines(_results(cells)), [(curves.plain("accuracy"), "accuracy")],
                      "title", xlabel="length")
    assert fig._suptitle.get_text() == "title"
    assert {"a / as_is (3 seeds)", "b / as_is (1 seed)"} <= set(_legend_texts(fig))


def test_ranking_rows_of_different_training_lengths_name_their_length():
    cells = [_cell("short", "as_is", n, 0.3) for n in (64, 128)]
    cells += [_cell("long", "as_is", n, 0.4, trained=128) for n in (128, 256)]
    fig = ranking.draw(mlm_lines(_results(cells)), "accuracy", "accuracy")
    (ax,) = fig.axes
    assert ax.get_title() == "about 2x the training length (length per row)"
    assert _row_labels(ax) == ["long / as_is (1 seed, L=256)", "short / as_is (1 seed, L=128)"]


def test_heatmap_columns_of_not_applicable_lengths_say_so(tmp_path):
    cells = [_cell("learned", "as_is", 64, 0.9, task="passkey"),
             _cell("learned", "as_is", 128, None, status="not_applicable", task="passkey")]
    line = task_lines(_results(cells, "tasks"), "passkey")[0]
    fig = task_plots._heatmap_figure("passkey", line)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64", "128"]
    assert sorted(t.get_text() for t in ax.texts) == ["0.90", "n/a"]


def test_seed_groups_are_one_line_and_their_differences_are_read():
    """With seed groups (results.json 'seed_cells', differences keyed 'a - b' with a kind),
    a group of runs is one line with its seeds, and the baseline differences are its own."""
    seeds_of = {"n_seeds": 3, "seeds": [0, 1, 2], "interval": "t over seed means"}
    runs = [_cell(f"rope_seed{s}", m, n, 0.3) for s in range(3) for m in ("as_is", "ntk")
            for n in (64, 128)]
    group = [dict(_cell("rope", m, n, 0.31), runs=["rope_seed0@1"], **seeds_of)
             for m in ("as_is", "ntk") for n in (64, 128)]
    results = _results(runs)
    results["seed_cells"] = {f"rope|{c['label']}|L={c['length']}|": c for c in group}
    a, b = "rope|ntk|L=128|", "rope|as_is|L=128|"
    results["differences"] = {
        f"{a} - {b}": {"a": a, "b": b, "kind": "baseline", "baseline": "as_is",
                       "accuracy": 0.02, "accuracy_lo": 0.01, "accuracy_hi": 0.03},
        "rope_seed0@1|ntk|L=128| - rope_seed0@1|as_is|L=128|": {
            "a": "rope_seed0@1|ntk|L=128|", "kind": "baseline", "baseline": "as_is",
            "accuracy": 0.5, "accuracy_lo": 0.4, "accuracy_hi": 0.6},
        f"{a} - x": {"a": a, "kind": "runs", "accuracy": 0.9}}
    lines = mlm_lines(results)
    assert [line.name for line in lines] == ["rope / as_is", "rope / ntk"]
    fig = ranking.draw(lines, "accuracy", "accuracy")
    assert _row_labels(fig.axes[0])[0].endswith("(3 seeds)")
    diff = differences.draw(lines, baseline_differences(results))
    (line,) = [ln for ln in diff.axes[0].lines if ln.get_label() == "rope / ntk"]
    assert list(line.get_xdata()) == [128] and list(line.get_ydata()) == [0.02]


def test_task_seed_groups_replace_their_runs():
    runs = [_cell(f"r_seed{s}", "as_is", n, 0.5, task="passkey") for s in range(2)
            for n in (64, 128)]
    alone = [_cell("other", "as_is", n, 0.4, task="passkey") for n in (64, 128)]
    results = _results(runs + alone, "tasks")
    results["groups"] = {"r": {"name": "r", "runs": ["r_seed0@1", "r_seed1@1"]},
                         "other@1": {"name": "other", "runs": ["other@1"]}}
    results["task_seed_cells"] = {
        f"r|as_is|L={n}|passkey": dict(_cell("r", "as_is", n, 0.45, task="passkey"),
                                       group="r", n_seeds=2, seeds=[0, 1]) for n in (64, 128)}
    lines = task_lines(results, "passkey")
    assert [(line.name, seeds(line.cells[0]).n) for line in lines] == [
        ("other / as_is", 1), ("r / as_is", 2)]
