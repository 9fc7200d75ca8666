"""MLM / causal LM / SOP losses against hand computations."""

import jax
import jax.numpy as jnp
import numpy as np

from posjax.training import losses


def _log_softmax(x):
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_mlm_loss_is_weighted_mean_over_masked_places():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
    targets = np.array([[1, 0, 4], [0, 2, 0]], np.int32)
    weights = np.array([[1, 0, 1], [0, 1, 0]], np.float32)
    loss, stats = losses.mlm_loss(jnp.asarray(logits), {"mlm_targets": targets, "mlm_weights": weights})
    lp = _log_softmax(logits)
    expected = -(lp[0, 0, 1] + lp[0, 2, 4] + lp[1, 1, 2]) / 3
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    assert float(stats["mlm_count"]) == 3
    correct = sum(int(np.argmax(logits[b, i]) == targets[b, i]) for b, i in ((0, 0), (0, 2), (1, 1)))
    assert float(stats["mlm_correct"]) == correct


def test_mlm_loss_in_float32_for_bf16_logits():
    logits = jnp.zeros((1, 2, 4), jnp.bfloat16)
    loss, _ = losses.mlm_loss(logits, {"mlm_targets": np.array([[1, 2]]), "mlm_weights": np.ones((1, 2))})
    assert loss.dtype == jnp.float32
    np.testing.assert_allclose(loss, np.log(4), rtol=1e-6)


def test_causal_loss_shifts_and_stays_inside_segments():
    # position t predicts token t+1; no target across a packed-example boundary or into padding
    ids = np.array([[5, 6, 7, 8, 9, 0]], np.int32)
    seg = np.array([[1, 1, 1, 2, 2, 0]], np.int32)
    v = 10
    logits = np.full((1, 6, v), -1e4, np.float32)
    for t, nxt in ((0, 6), (1, 7), (3, 9)):
        logits[0, t, nxt] = 0.0  # perfect predictions where a target exists
    loss, stats = losses.causal_lm_loss(jnp.asarray(logits), {"input_ids": ids, "segment_ids": seg})
    assert float(stats["mlm_count"]) == 3
    np.testing.assert_allclose(loss, 0.0, atol=1e-5)
    assert float(stats["mlm_correct"]) == 3


def test_sop_added_when_present_and_summaries():
    outputs = {"mlm_logits": jnp.zeros((1, 2, 4)), "sop_logits": jnp.array([[0.0, 0.0]])}
    batch = {"mlm_targets": np.array([[1, 0]]), "mlm_weights": np.array([[1.0, 0.0]]),
             "sop_labels": np.array([1])}
    loss, stats = losses.pretraining_loss(outputs, batch, causal=False)
    np.testing.assert_allclose(loss, np.log(4) + np.log(2), rtol=1e-6)
    summary = losses.summarize(jax.device_get(stats))
    np.testing.assert_allclose(summary["loss"], np.log(4) + np.log(2), rtol=1e-6)
    assert summary["sop_accuracy"] in (0.0, 1.0)


def test_gathered_mlm_loss_equals_full_and_reports_dropped():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 6, 7)).astype(np.float32)
    targets = rng.integers(0, 7, (2, 6)).astype(np.int32)
    weights = np.array([[0, 1, 0, 1, 0, 0], [1, 0, 0, 0, 0, 1]], np.float32)
    batch = {"mlm_targets": targets, "mlm_weights": weights}
    full, full_stats = losses.mlm_loss(jnp.asarray(logits), batch)
    pos = losses.prediction_positions(jnp.asarray(weights), 3)
    assert np.asarray(pos)[:, :2].tolist() == [[1, 3], [0, 5]]  # scored places first, in order
    gathered = np.take_along_axis(logits, np.asarray(pos)[..., None], axis=1)
    loss, stats = losses.mlm_loss(jnp.asarray(gathered), batch, pos)
    np.testing.assert_allclose(loss, full, rtol=1e-6)
    assert float(stats["mlm_count"]) == 4 and float(stats["mlm_dropped"]) == 0
    assert float(stats["mlm_correct"]) == float(full_stats["mlm_correct"])
    # Too few places: the loss is over what was kept, and the rest is reported, not hidden.
    pos1 = losses.prediction_positions(jnp.asarray(weights), 1)
    _, stats = losses.mlm_loss(jnp.asarray(gathered[:, :1]), batch, pos1)
    assert float(stats["mlm_count"]) == 2 and float(stats["mlm_dropped"]) == 2


def test_top1_correct_is_argmax_on_random_logits_and_counts_ties_as_right():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(4, 7, 50)).astype(np.float32)
    targets = rng.integers(0, 50, size=(4, 7))
    targets[:, 0] = logits[:, 0].argmax(-1)  # some right answers for sure
    got = np.asarray(losses.top1_correct(jnp.asarray(logits), jnp.asarray(targets)))
    np.testing.assert_array_equal(got, (logits.argmax(-1) == targets).astype(np.float32))
    assert got[:, 0].all()
    # A tie for the top: every tied index counts as right (argmax would name only the first),
    # an index below the top does not.
    tied = jnp.asarray([[1.0, 3.0, 3.0, 0.0]] * 3)
    np.testing.assert_array_equal(losses.top1_correct(tied, jnp.asarray([1, 2, 3])), [1, 1, 0])
