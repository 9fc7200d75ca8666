"""experiments/minilm_extension.py: its bad input and its first stage (the converted
MiniLM workdir it trains from). The later stages are eval.py's driver, tested elsewhere."""

import pytest

from experiments import minilm_extension as bench
from posjax.convert import store
from posjax.training import checkpoints


@pytest.mark.parametrize("argv, field", [
    (["--length=512"], "--length"),
    (["--train_length=1024", "--length=2048"], "--train_length"),
    (["--head_steps=0"], "--head_steps"),
    (["--recovery_steps=1,x"], "--alphas/--recovery_steps/--seeds/--long_steps"),
    (["--seeds=0,a"], "--alphas/--recovery_steps/--seeds/--long_steps"),
    (["--long_steps=300,800"], "--long_steps"),  # not past the last of --recovery_steps
    (["--recovery_methods=hierarchical,truncate", "--long_methods=interpolate"],
     "--long_methods"),
    (["--heldout_fraction=1.5"], "--heldout_fraction"),
    (["--cluster_tokens=-3"], "--cluster_tokens"),
    (["--continue_batch_size=0"], "--continue_batch_size"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, field):
    assert bench.main([f"--out={tmp_path}", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0]
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.slow
def test_stage_one_converts_minilm_into_a_kjv_workdir(tmp_path):
    args = bench.parse([f"--out={tmp_path}", "--smoke"])
    workdir = bench.converted_workdir(args)
    assert checkpoints.latest_step(workdir) == 0
    config = store.read_config(workdir)
    assert (config.data.corpus, config.data.tokenizer) == ("kjv", "wordpiece")
    assert config.data.heldout_fraction == 0.2 and config.data.split_seed == 2
    assert config.data.seq_len == 512
    assert config.position.name == "learned"
    assert bench.converted_workdir(args) == workdir  # a rerun keeps it (resumable)


def test_a_signal_during_the_head_stops_the_study_before_any_evaluation(tmp_path, monkeypatch):
    """The head's training stopped by SIGTERM at a saved step: main returns 0 without
    evaluating (a half-trained head would be scored under the finished head's key)."""
    import ml_collections

    from posjax import training

    config = ml_collections.ConfigDict({"train": {"steps": 300}})
    monkeypatch.setattr(bench, "converted_workdir", lambda args: str(tmp_path))
    monkeypatch.setattr(store, "read_config", lambda workdir: config)
    monkeypatch.setattr(checkpoints, "latest_step", lambda workdir: 200)
    monkeypatch.setattr(training, "train_and_evaluate",
                        lambda config, workdir: {"step": 215, "interrupted": "SIGTERM"})
    monkeypatch.setattr(bench, "evaluate", lambda *a: pytest.fail("evaluated a stopped head"))
    assert bench.main([f"--out={tmp_path}"]) == 0
