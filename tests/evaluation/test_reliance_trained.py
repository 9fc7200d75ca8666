"""Position reliance on a model that uses its positions: a 16-row learned table trained (400
steps, tiny) on a synthetic language where order is everything must lose most of its accuracy
when its position ids are shuffled within rows. The NoPE side (exactly 0) is in
test_reliance_recovery.py."""

from __future__ import annotations

import os
import pytest

from tests.evaluation.fixtures import TRAINED, synthetic_config


@pytest.mark.slow
def test_a_learned_table_trained_on_an_ordered_language_relies_on_its_positions(tmp_path):
    from absl import logging as absl_logging

    from posjax.evaluation import driver
    from posjax.training import train_and_evaluate

    absl_logging.set_verbosity(absl_logging.ERROR)
    workdir = str(tmp_path / "learned")
    train_and_evaluate(synthetic_config("learned"), workdir, progress_bar=False)
    results = driver.run(driver.Request(
        out=str(tmp_path / "eval"), workdirs=[workdir], lengths=[TRAINED], methods=["as_is"],
        masked_tokens=256, batch_tokens=256, progress=False))
    (reliance,) = results["reliance"].values()
    assert reliance["length"] == TRAINED
    # intact well above the 1/16 of guessing; shuffled positions lose most of it, and the
    # whole 95% interval of the difference is far from 0
    assert reliance["intact"] > 0.5, reliance
    assert reliance["accuracy"] > 0.3 and reliance["accuracy_lo"] > 0.2, reliance
    assert reliance["loss"] < 0, reliance  # loss intact - shuffled: shuffling costs loss too
    with open(os.path.join(str(tmp_path / "eval"), "results.md")) as f:
        assert "position reliance at L=16" in f.read()
