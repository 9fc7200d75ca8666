"""The algorithmic benchmark in the evaluator (posjax.evaluation.run.algorithmic): the scorer is
the reference's masked accuracy, cells pair by sequence across runs, the derived means and
differences are what their definitions say, and the tiny experiment runs end to end through
eval.py's driver, resuming without rescoring."""

from __future__ import annotations

import json
import os
import shutil

import jax
import numpy as np
import pytest
from flax import nnx

from configs import algorithmic as algorithmic_config
from configs.experiments import algorithmic as grid
from posjax import models
from posjax.data import algorithmic, curriculum, tape
from posjax.errors import ConfigError
from posjax.evaluation import driver
from posjax.evaluation.stats import intervals
from posjax.evaluation.results import results_file
from posjax.evaluation.derive import algorithmic as derive
from posjax.evaluation.run.algorithmic import scoring
from posjax.evaluation.report.algorithmic import tables
from posjax.evaluation.run.algorithmic import sweep as algorithmic_sweep
from posjax.evaluation.methods import NotApplicable
from posjax.models.tape_model import output_logits
from posjax.training import train_and_evaluate


def _config(arg):
    config = algorithmic_config.get_config(arg)
    config.model.vocab_size = tape.FIRST_SYMBOL + curriculum.task_of(config).input_size + 1
    return config


def _params(config, seed=0, scale=1.0):
    """(model, its params as a pure dict); `scale` multiplies every weight (larger weights:
    predictions that differ from place to place)."""
    model = models.build_model(config, nnx.Rngs(seed))
    state = jax.tree.map(lambda x: x * scale, nnx.state(model, nnx.Param))
    nnx.update(model, state)
    return model, nnx.to_pure_dict(state)


PLAIN = scoring.Settings(sequences=6, dropout=False, positions="plain", bucket=8)


def test_the_scorer_is_the_reference_masked_accuracy():
    """binary_addition (a termination mask, so rows count different places): the scorer's
    sums equal argmax == target over the task's mask of the unpadded tape, computed by hand
    as the reference's accuracy_fn does."""
    config = _config("binary_addition,rope,tiny")
    model, params = _params(config, scale=8.0)
    length = 9
    out = scoring.score(config, params, length, PLAIN)
    sample = scoring.test_sample(algorithmic.get("binary_addition"), length, PLAIN)
    assert out["padded"] > out["places"]  # the scorer padded; the hand computation does not
    batch = tape.tape_batch(sample, algorithmic.get("binary_addition").input_size)
    logits = np.asarray(model(batch, deterministic=True)["task_logits"])
    n, m = sample.inputs.shape[1], sample.outputs.shape[1]
    predicted = np.argmax(np.asarray(output_logits(logits, n, m)), axis=-1)
    rows = out["rows"]
    assert rows["count"] == sample.mask.sum(1).tolist()
    assert rows["correct"] == ((predicted == sample.outputs) & sample.mask).sum(1).tolist()
    accuracy = sum(rows["correct"]) / sum(rows["count"])
    assert accuracy == pytest.approx(algorithmic.base.masked_accuracy(predicted, sample))
    assert 0.0 < accuracy < 1.0 and len(set(rows["count"])) > 1
    assert rows["cluster"] == list(range(PLAIN.sequences))


def test_cells_pair_by_sequence_across_runs():
    """Every run of a task sees the same sequences at a length (and each length its own);
    randomized runs share one ordered subset per sequence, plain runs 0..n-1; two runs'
    cells score the same places, so their difference pairs sequence by sequence."""
    task = algorithmic.get("reverse_string")
    s = scoring.Settings(sequences=5)
    a, b = scoring.test_sample(task, 12, s), scoring.test_sample(task, 12, s)
    assert np.array_equal(a.inputs, b.inputs)
    assert not np.array_equal(scoring.test_sample(task, 13, s).inputs[:, :12], a.inputs)
    plain, rnd = _config("reverse_string,rope,tiny"), _config("reverse_string,rope,randomized,tiny")
    tp, _ = scoring.test_tape(plain, 12, s)
    tr, places = scoring.test_tape(rnd, 12, s)
    tr2, _ = scoring.test_tape(_config("reverse_string,xl,randomized,tiny"), 12, s)
    assert np.array_equal(tp["input_ids"], tr["input_ids"])
    assert np.array_equal(tp["positions"][:, :places], np.tile(np.arange(places), (5, 1)))
    pos = tr["positions"][:, :places]
    assert np.array_equal(pos, tr2["positions"][:, :places])  # the same for every run
    assert (np.diff(pos, axis=1) > 0).all() and pos.max() < 2048
    assert len({tuple(p) for p in pos}) == 5  # one draw per sequence
    tplain, _ = scoring.test_tape(rnd, 12, scoring.Settings(sequences=5, positions="plain"))
    assert np.array_equal(tplain["positions"], tp["positions"])

    rows = [scoring.score(plain, _params(plain, seed)[1], 12, PLAIN)["rows"] for seed in (0, 1)]
    d = intervals.paired_seeds([rows[0]], [rows[1]], [0], seed=0)
    by_hand = (sum(rows[0]["correct"]) - sum(rows[1]["correct"])) / sum(rows[0]["count"])
    assert d["accuracy"] == pytest.approx(by_hand)


def test_dropout_at_evaluation_is_seeded_and_on_by_default():
    config = _config("reverse_string,rope,tiny")
    _, params = _params(config, scale=4.0)
    on = scoring.Settings(sequences=6, positions="plain", bucket=8)
    assert scoring.Settings().dropout is True and scoring.Settings().positions == "reference"
    first = scoring.score(config, params, 10, on)["rows"]
    assert scoring.score(config, params, 10, on)["rows"] == first
    assert scoring.score(config, params, 10, PLAIN)["rows"]["loss"] != first["loss"]


def test_a_tape_longer_than_the_model_is_not_applicable():
    config = _config("duplicate_string,rope,tiny")
    config.model.max_length = 40
    with pytest.raises(NotApplicable, match="max_length=40"):
        scoring.test_tape(config, 20, PLAIN)


@pytest.mark.parametrize("fields, field", [({"sequences": 1}, "sequences"),
                                           ({"positions": "shuffled"}, "test_positions")])
def test_bad_settings_name_their_field(fields, field):
    with pytest.raises(ConfigError) as e:
        scoring.check_settings(scoring.Settings(**fields))
    assert e.value.field == field


def test_default_lengths_cover_training_and_41_to_500():
    lengths = scoring.default_lengths(40)
    assert lengths[:40] == list(range(1, 41)) and lengths[40] == 41 and lengths[-1] == 500
    assert grid.LENGTHS == lengths and len(grid.TEST_LENGTHS) == 52


# -- derived sections, on hand-made cells -------------------------------------------------

def _cell(task, scheme, randomized, length, rng, g=20):
    # the places a sequence scores depend on the task and length only (the same sequences)
    count = np.random.default_rng([len(task), length]).integers(1, 6, size=g)
    correct = rng.binomial(count, 0.3 + 0.5 * rng.random())
    rows = {"correct": correct.tolist(), "count": count.tolist(),
            "loss": (count * 0.5).tolist(), "cluster": list(range(g))}
    overall = intervals.summarize(rows, draws=50)  # a whole record (results.record)
    return {"run": f"{task}_{scheme}{'_randomized' if randomized else ''}", "status": "ok",
            "scheme": scheme, "task": task, "randomized": randomized, "length": length,
            "trained_max_input": 4, "test_positions": "plain", "dropout": True,
            "sequences": g, "step": 10, "workdir": "w", "seed": 0, "rows": rows,
            "overall": overall, "n_seeds": 1, "seeds": [0], "interval": overall["interval"],
            "places": int(count.sum()), "padded": 0, "rows_per_batch": g, "wall_s": 0.0,
            "first_batch_s": None}


def _results(tasks=("reverse_string", "duplicate_string"), lengths=(3, 5, 6), seeds=(0, 1, 2)):
    rng = np.random.default_rng(0)
    versions = dict.fromkeys(("python", "jax", "flax", "numpy", "backend"), "test")
    results = {"schema": results_file.SCHEMA, "created": "2026-01-01T00:00:00Z",
               "versions": dict(versions, posjax_commit=None),
               "settings": {"seed": 0, "sequences": 20, "test_dropout": True,
                            "test_positions": "plain", "experiment": "algorithmic"},
               "runs": {}, "cells": {}, "algorithmic": {}}
    for task in tasks:
        for randomized in (False, True):
            for s in seeds:
                name = f"{task}_rope{'_randomized' if randomized else ''}" + (
                    f"_seed{s}" if s else "")
                config = {"seed": s, "data": {"task": task, "randomized_max_length":
                                              2048 if randomized else None}}
                key = f"../w/{name}@10"
                results["runs"][key] = {"name": name, "workdir": f"../w/{name}", "step": 10,
                                        "scheme": "rope", "trained_length": 4, "causal": False,
                                        "config": config}
                for n in lengths:
                    c = _cell(task, "rope", randomized, n, rng)
                    results["algorithmic"][f"{key}|L={n}|abcd"] = dict(c, run=name, seed=s)
    return results


def _ratio(cells):
    return sum(sum(c["rows"]["correct"]) for c in cells) / sum(
        sum(c["rows"]["count"]) for c in cells)


def test_derived_scores_and_differences_are_their_definitions():
    results = derive.derive(_results())
    cells = results["algorithmic"]
    groups = results[derive.GROUPS]
    assert sorted(len(g["runs"]) for g in groups.values()) == [3, 3, 3, 3]

    def run_cells(task, randomized, seed, n):
        name = f"{task}_rope{'_randomized' if randomized else ''}" + (f"_seed{seed}" if seed else "")
        return cells[f"../w/{name}@10|L={n}|abcd"]

    def score(task, randomized, lengths):  # mean over lengths of the mean over seeds
        return np.mean([np.mean([_ratio([run_cells(task, randomized, s, n)]) for s in (0, 1, 2)])
                        for n in lengths])

    scores = {(d["task"], d["randomized"], d["range"]): d
              for d in results[derive.SCORES].values()}
    for task in ("reverse_string", "duplicate_string"):
        assert scores[(task, True, "test")]["accuracy"] == pytest.approx(score(task, True, [5, 6]))
        assert scores[(task, False, "train")]["accuracy"] == pytest.approx(score(task, False, [3]))
        d = [x for x in results[derive.DIFFERENCES].values()
             if x["kind"] == "range" and x["task"] == task and x["range"] == "test"][0]
        want = score(task, True, [5, 6]) - score(task, False, [5, 6])
        assert d["accuracy"] == pytest.approx(want)
        assert d["accuracy_lo"] < d["accuracy"] < d["accuracy_hi"] and d["n_seeds"] == 3
    avg = results[derive.AVERAGES]["rope|abcd|test"]
    per_task = [score(t, True, [5, 6]) - score(t, False, [5, 6])
                for t in ("reverse_string", "duplicate_string")]
    assert avg["accuracy"] == pytest.approx(np.mean(per_task))
    assert avg["tasks"] == ["duplicate_string", "reverse_string"]
    at5 = [x for x in results[derive.DIFFERENCES].values() if x["kind"] == "length"
           and x["length"] == 5 and x["task"] == "reverse_string"][0]
    assert at5["accuracy"] == pytest.approx(np.mean(
        [_ratio([run_cells("reverse_string", True, s, 5)]) -
         _ratio([run_cells("reverse_string", False, s, 5)]) for s in (0, 1, 2)]))
    text = tables.to_markdown(results)
    assert "mean over tasks" in text and "3 seeds" not in text.split("##")[0]
    # the papers' statistic: the best seed's mean over the test lengths, named with its seed
    per_seed = {s: np.mean([_ratio([run_cells("duplicate_string", True, s, n)]) for n in (5, 6)])
                for s in (0, 1, 2)}
    top = max(per_seed, key=per_seed.get)
    best = text.split("## The papers' statistic")[1].split("\n\n")[1]
    row = next(line for line in best.splitlines() if line.startswith("| duplicate_string"))
    assert row.split(" | ")[2].rstrip(" |") == f"{per_seed[top]:.3f} (seed {top} of 3)"
    assert "randomized minus plain" in "\n".join(tables.summary_lines(results))
    assert tables.to_csv(results).count("\ndifference,") == 2 * 3


def test_a_seed_missing_on_one_side_is_left_out_of_the_pairs():
    results = _results(tasks=("reverse_string",), seeds=(0, 1, 2))
    gone = [k for k in results["algorithmic"] if "_randomized_seed2@" in k]
    for k in gone:
        del results["algorithmic"][k]
    derive.derive(results)
    d = [x for x in results[derive.DIFFERENCES].values() if x["kind"] == "range"]
    assert d and all(x["seeds"] == [0, 1] for x in d)


# -- end to end ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(request, results) of the ':tiny' experiment: 2 runs of 6 steps, 4 lengths."""
    root = tmp_path_factory.mktemp("algorithmic")
    exp = grid.get_config("tiny")
    exp.workdir_root = str(root / "workdirs")
    request = driver.Request(out=str(root / "out"), experiment=exp,
                             lengths=list(exp.eval.lengths), sequences=exp.eval.sequences,
                             progress=False)
    return request, driver.run(request)


def test_a_two_step_run_is_trained_then_scored_within_and_past_its_lengths(tmp_path):
    """The fast tier's end-to-end run: train.py's loop for 2 steps of one bucket, then eval.py's
    driver on its workdir at a training length and a longer one, into results.json and the
    summary's table."""
    config = algorithmic_config.get_config("parity_check,rope,tiny")
    config.data.max_input_length = 3
    config.model.num_layers = 1
    config.train.steps, config.train.eval_every, config.train.checkpoint_every = 2, 0, 2
    workdir, out = str(tmp_path / "run"), str(tmp_path / "out")
    train_and_evaluate(config, workdir, progress_bar=False)
    request = driver.Request(out=out, workdirs=[workdir], lengths=[3, 6], sequences=4,
                             progress=False)
    cells = driver.run(request)["algorithmic"]
    assert sorted(c["length"] for c in cells.values()) == [3, 6]
    assert all(c["status"] == "ok" and c["overall"]["clusters"] == 4 for c in cells.values())
    saved = results_file.load(out)
    assert {d["range"] for d in saved[derive.SCORES].values()} == {"train", "test"}


@pytest.mark.slow
def test_the_tiny_experiment_runs_end_to_end(tiny):
    request, results = tiny
    cells = results["algorithmic"]
    assert len(cells) == 2 * 4 and all(c["status"] == "ok" for c in cells.values())
    assert {c["test_positions"] for c in cells.values()} == {"plain", "randomized"}
    files = set(os.listdir(request.out))
    assert {"results.json", "results.md", "results.csv", "accuracy_reverse_string.png",
            "difference_reverse_string.png"} <= files
    saved = json.load(open(os.path.join(request.out, "results.json")))
    assert saved[derive.SCORES] and saved[derive.DIFFERENCES] and saved[derive.AVERAGES]
    assert saved["settings"]["test_dropout"] is True


@pytest.mark.slow
def test_a_rerun_skips_scored_cells_and_the_summary_prints_them(tiny, monkeypatch, capsys):
    request, results = tiny

    def refuse(*a, **k):
        raise AssertionError("a scored cell was scored again")

    monkeypatch.setattr(scoring, "score", refuse)
    again = driver.run(driver.Request(**{**request.__dict__}))
    assert {k: c["rows"] for k, c in again["algorithmic"].items()} == \
        {k: c["rows"] for k, c in results["algorithmic"].items()}
    from posjax.evaluation import summary
    summary.main(["summary", request.out])
    printed = capsys.readouterr().out
    assert "algorithmic scores" in printed and "reverse_string_rope_randomized" in printed
    # a run whose workdir is gone while results.json holds all its cells is not retrained
    shutil.rmtree(os.path.join(request.experiment.workdir_root, "reverse_string_rope"))
    monkeypatch.setattr(driver.training, "train_and_evaluate", refuse)
    kept = driver.run(driver.Request(**{**request.__dict__}))
    assert {k: c["rows"] for k, c in kept["algorithmic"].items()} == \
        {k: c["rows"] for k, c in results["algorithmic"].items()}


def test_bad_sequences_are_refused_before_anything_is_trained(tmp_path):
    exp = grid.get_config("tiny")
    exp.workdir_root = str(tmp_path / "none")
    request = driver.Request(out=str(tmp_path / "out"), experiment=exp, lengths=[1, 2],
                             sequences=0)
    with pytest.raises(ConfigError) as e:
        driver.check_request(request)
    assert e.value.field == "sequences"


def test_planned_keys_name_every_length():
    keys = algorithmic_sweep.planned_keys("w@6", [3, 7], scoring.Settings())
    assert keys[0].startswith("w@6|L=3|") and keys[1].startswith("w@6|L=7|")


def test_a_perfect_score_has_no_zero_width_interval():
    results = _results(tasks=("reverse_string",))
    for c in results["algorithmic"].values():
        c["rows"]["correct"] = list(c["rows"]["count"])
    derive.derive(results)
    for d in results[derive.SCORES].values():
        assert d["accuracy"] == 1.0 and d["accuracy_lo"] < 1.0 == d["accuracy_hi"]
        assert "Wilson over 20 sequences" in d["interval"]
    for c in results[derive.SEED_CELLS].values():
        assert c["overall"]["accuracy_lo"] < 1.0


def test_resume_scores_only_the_cells_missing_from_results_json(tmp_path, monkeypatch):
    """In process, without training: a run whose params are already loaded. A second sweep
    scores nothing; with one cell removed from results.json, only that one."""
    from posjax.evaluation.run import restore

    config = _config("reverse_string,rope,tiny")
    _, params = _params(config)
    run = restore.Run("r", str(tmp_path / "w"), 6, config, tokenizer=None, params=params)
    out = str(tmp_path / "out")
    settings = scoring.Settings(sequences=4, bucket=8)
    first = algorithmic_sweep.run_algorithmic([run], [3, 4], settings, out, meta={},
                                              progress=False)
    assert len(first["algorithmic"]) == 2
    calls = []
    real = scoring.score
    monkeypatch.setattr(scoring, "score", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    algorithmic_sweep.run_algorithmic([run], [3, 4], settings, out, meta={}, progress=False)
    assert calls == []
    saved = json.load(open(os.path.join(out, "results.json")))
    dropped = [k for k in saved["algorithmic"] if "|L=4|" in k][0]
    del saved["algorithmic"][dropped]
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(saved, f)
    again = algorithmic_sweep.run_algorithmic([run], [3, 4], settings, out, meta={},
                                              progress=False)
    assert calls == [4]
    assert again["algorithmic"][dropped]["rows"] == first["algorithmic"][dropped]["rows"]


def test_the_summary_prints_and_rewrites_an_algorithmic_folder(tmp_path):
    from posjax.evaluation import summary

    results = _results(tasks=("reverse_string",))
    text = "\n".join(summary.lines(derive.derive(results)))
    assert "## cells" not in text and "algorithmic scores" in text
    assert "mean of reverse_string" in text
    written = summary.rewrite(str(tmp_path), results)
    assert {"results.json", "results.md", "results.csv", "accuracy_reverse_string.png",
            "difference_reverse_string.png"} <= set(written) == set(os.listdir(tmp_path))
    assert json.load(open(tmp_path / "results.json"))[derive.SCORES]


@pytest.mark.parametrize("fields, field", [({"methods": ["ntk"]}, "methods"),
                                           ({"tasks": ["passkey"]}, "tasks"),
                                           ({"lengths": [0, 5]}, "lengths")])
def test_options_algorithmic_runs_do_not_take_are_refused_up_front(tmp_path, fields, field):
    exp = grid.get_config("tiny")
    exp.workdir_root = str(tmp_path / "none")
    request = driver.Request(out=str(tmp_path / "out"), experiment=exp,
                             **{"lengths": [1, 2], **fields})
    with pytest.raises(ConfigError) as e:
        driver.check_request(request)
    assert e.value.field == field


def test_a_run_trained_per_layer_is_tested_with_a_draw_per_layer_and_sequence():
    config = algorithmic_config.get_config("reverse_string,rope,randomized,tiny")
    assert config.data.randomized_layers
    settings = scoring.Settings(sequences=20)
    batch, places = scoring.test_tape(config, 12, settings)
    per = batch["layer_positions"]
    assert per.shape == (20, config.model.num_layers, batch["input_ids"].shape[1])
    real = per[:, :, :places]
    assert (np.diff(real, axis=-1) > 0).all() and real.max() < 2048
    assert (per[:, :, places:] == 0).all()
    assert not np.array_equal(real[0, 0], real[0, 1]) and not np.array_equal(real[0], real[1])
    again, _ = scoring.test_tape(config, 12, settings)  # the same for every run
    assert np.array_equal(again["layer_positions"], per)
    plain = scoring.test_tape(config, 12, scoring.Settings(sequences=20, positions="plain"))[0]
    assert "layer_positions" not in plain


def test_a_plain_run_and_its_randomized_twin_pair_for_every_encoding():
    for scheme in ("rope", "xl", "sinusoidal", "learned", "alibi"):
        plain = algorithmic_config.get_config(f"reverse_string,{scheme}").to_dict()
        twin = algorithmic_config.get_config(f"reverse_string,{scheme},randomized").to_dict()
        assert derive.pair_fingerprint(plain, 5000) == derive.pair_fingerprint(twin, 5000)
        other = algorithmic_config.get_config("duplicate_string,rope").to_dict()
        assert derive.pair_fingerprint(plain, 5000) != derive.pair_fingerprint(other, 5000)
