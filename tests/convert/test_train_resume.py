"""A converted workdir is a training workdir: train.py's loop resumes it from the converted
weights (step 0 checkpoint, fresh LAMB state, data iterator at its start) and continues."""

from __future__ import annotations

import numpy as np
import pytest

# Slow tier: whole train.py / eval.py runs in subprocesses.
pytestmark = pytest.mark.slow


def test_training_resumes_from_converted_weights(cases, tmp_path):
    from posjax import pretrained
    from posjax.convert import store as wd
    from configs.workdir import get_config
    from posjax.training import checkpoints, train_and_evaluate

    case = cases["bert"]
    out = case.model.save(str(tmp_path / "wd"))
    assert checkpoints.latest_step(out) == 0

    config = get_config(out)  # what `train.py --config=configs/workdir.py:OUT` loads
    config.data.max_documents, config.data.batch_size, config.data.seq_len = 8, 2, 32
    config.train.steps, config.train.eval_every, config.train.log_every = 1, 0, 1
    config.train.checkpoint_every = 1
    summary = train_and_evaluate(config, out, progress_bar=False)
    assert summary["start_step"] == 0 and summary["step"] == 1
    assert np.isfinite(summary["last_loss"])
    assert checkpoints.latest_step(out) == 1

    # The step-1 params are the converted ones plus one small update, not a fresh init.
    trained = wd.read_params(out, case.model._abstract_pure())
    word = "encoder", "embeddings", "word", "embedding"
    a, b = trained, case.model.params
    for k in word:
        a, b = a[k], b[k]
    assert 0 < np.abs(np.asarray(a) - np.asarray(b)).max() < 1e-2
    assert pretrained.load(out).config.model.max_length == 64


def test_fresh_iterator_state_is_what_the_pipeline_starts_from(cases, tmp_path):
    """convert writes FRESH_ITERATOR_STATE as the data item of the step-0 checkpoint."""
    import posjax.data as data
    from posjax.convert import store as wd
    from configs.workdir import get_config

    out = cases["bert"].model.save(str(tmp_path / "wd"))
    config = get_config(out)
    config.data.max_documents, config.data.batch_size, config.data.seq_len = 8, 2, 32
    tok = data.load_or_build(config, out)
    it = data.make_train_iterator(config, tok, int(config.seed))
    assert data.get_iterator_state(it) == wd.FRESH_ITERATOR_STATE
