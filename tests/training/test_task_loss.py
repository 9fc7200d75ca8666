"""The algorithmic tasks' loss (posjax.training.losses.task_loss) and their train step: only
the tape's output places count, and the curriculum compiles once per bucket."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from posjax.data import tape
from posjax.training import losses
from tests.algorithmic_stand_in import ReverseWithEnd

TASK = ReverseWithEnd()


def _batch(loss_on="outputs", n=3, length=12):
    s = TASK.sample(np.random.default_rng(0), 2, n)
    return {k: jnp.asarray(v) for k, v in
            tape.tape_batch(s, TASK.input_size, length=length, loss_on=loss_on).items()}


def _logits(seed=0, shape=(2, 12, 3)):
    return jax.random.normal(jax.random.PRNGKey(seed), shape) * 3.0


@pytest.mark.parametrize("loss_on", ["outputs", "mask"])
def test_places_without_weight_change_neither_the_loss_nor_its_gradient(loss_on):
    b = _batch(loss_on)
    logits = _logits()
    off = np.asarray(b["mlm_weights"]) == 0  # inputs, padding (and masked-out outputs: 'mask')
    assert off.any() and (~off).any()
    noisy = jnp.where(off[..., None], _logits(seed=1) * 100.0, logits)
    loss, stats = losses.task_loss(logits, b)
    loss2, stats2 = losses.task_loss(noisy, b)
    assert float(loss) == pytest.approx(float(loss2), rel=1e-6)
    assert float(stats["mlm_correct"]) == float(stats2["mlm_correct"])
    grad = jax.grad(lambda x: losses.task_loss(x, b)[0])(logits)
    assert float(jnp.abs(grad[off]).max()) == 0.0
    assert float(jnp.abs(grad[~off]).min()) > 0.0


def test_the_loss_is_the_mean_cross_entropy_over_output_places_and_accuracy_uses_the_mask():
    b = _batch("outputs")
    logits = _logits()
    n, m = 3, TASK.output_length(3)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits[:, n:n + m],
                                                         b["mlm_targets"][:, n:n + m])
    loss, stats = losses.task_loss(logits, b)
    # the reference: mean over rows and EVERY output place (padding after the end included)
    assert float(loss) == pytest.approx(float(ce.mean()), rel=1e-6)
    right = np.asarray(jnp.argmax(logits[:, n:n + m], -1) == b["mlm_targets"][:, n:n + m])
    assert float(stats["mlm_correct"]) == right[:, :m - 1].sum()  # the mask drops the last place
    assert float(stats["accuracy_count"]) == 2 * (m - 1)
    summary = losses.summarize(jax.device_get(stats))
    assert summary["mlm_accuracy"] == pytest.approx(right[:, :m - 1].mean())


def test_pretraining_loss_dispatches_on_task_logits():
    b = _batch()
    logits = _logits()
    loss, _ = losses.pretraining_loss({"task_logits": logits}, b, causal=False)
    assert float(loss) == pytest.approx(float(losses.task_loss(logits, b)[0]))
