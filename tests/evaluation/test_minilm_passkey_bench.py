"""experiments/minilm_passkey.py (the MiniLM passkey study): its bad input and the
fine-tuning config it builds. The stages themselves are continued.prepare_workdir, the
trainer and eval.py's task sweep, tested elsewhere; `--smoke` runs them end to end (minutes)."""

import pytest

from experiments import minilm_passkey as bench
from posjax.config import defaults


@pytest.mark.parametrize("argv, field", [
    (["--steps=0"], "--steps"),
    (["--fraction=1.5"], "--fraction"),
    (["--rows=0"], "--rows"),
    (["--lengths=512,x"], "--lengths"),
    (["--methods=truncate,tile"], "--baseline"),
    (["--lengths=512,2"], "lengths"),  # the sweep's own check, before any training
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, argv, field):
    source = tmp_path / "source"
    source.mkdir()
    # a stand-in for the trained source: the checks under test come before or after it
    monkeypatch.setattr(bench, "open_source", lambda args: pytest.fail("opened the source")
                        if field != "lengths" else _Run())
    out = tmp_path / "out"
    assert bench.main([f"--out={out}", f"--source={source}", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0]
    assert not out.exists()  # nothing written


def test_missing_source_is_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    assert bench.main([f"--out={out}", f"--source={tmp_path / 'nope'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--source" in err[0] and not out.exists()


class _Run:
    config = defaults.get_config("tiny")
    tokenizer = None


def test_config_mixes_passkey_into_the_source_config():
    source = defaults.get_config("tiny")
    args = bench.parse(["--out=x", "--steps=40", "--fraction=0.25", "--digits=3",
                        "--batch_size=4"])
    cfg = bench.passkey_config(source, args)
    assert dict(cfg.data.tasks) == {"passkey": 0.25} and cfg.data.task_digits == 3
    assert (cfg.train.steps, cfg.data.batch_size, cfg.train.eval_every) == (40, 4, 0)
    assert cfg.train.learning_rate == source.train.learning_rate
    assert cfg.model.to_dict() == source.model.to_dict()  # the same model, fine-tuned
    assert source.data.get("tasks", None) is None  # the source config is untouched
    assert cfg.seed == 0  # training rows follow --seed unless --train_seed says otherwise
    assert bench.passkey_config(source, bench.parse(["--out=x", "--train_seed=3"])).seed == 3
