"""The scoring function. MLM: the LM head runs only at the masked places (training's gather)
and the per-bucket sums equal those of full-vocabulary logits at every place; a row with more
predictions than the bound is refused. Causal: next-token targets from the unmasked text, every
position but the last scored, perplexity = exp(mean loss); truncation cuts context only."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from posjax import models
from posjax.evaluation.run import batches, metrics
from tests.evaluation.fixtures import tiny_config


@pytest.mark.slow
def test_causal_scoring_counts_every_next_token():
    config = tiny_config("alibi")
    config.model.causal = True
    config.model.vocab_size = 50
    model = models.build_model(config, nnx.Rngs(params=0))
    graphdef, params_state = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(params_state)
    scorer = metrics.make_scorer(graphdef, jax.tree.structure(params_state), config)
    rng = np.random.default_rng(0)
    B, L = 2, 12
    ids = rng.integers(5, 50, (B, L)).astype(np.int32)
    weights = (rng.random((B, L)) < 0.3).astype(np.float32)
    base = {"input_ids": np.where(weights > 0, 4, ids).astype(np.int32),  # 4 = [MASK]
            "token_type_ids": np.zeros((B, L), np.int32),
            "positions": np.tile(np.arange(L, dtype=np.int32), (B, 1)),
            "segment_ids": np.ones((B, L), np.int32),
            "mlm_targets": np.where(weights > 0, ids, 0).astype(np.int32), "mlm_weights": weights}
    full = batches.for_method(base, None, causal=True)
    np.testing.assert_array_equal(full["input_ids"], ids)  # causal models read the real text
    cut = batches.for_method(base, 4, causal=True)
    sums = []
    for batch in (full, cut):
        scores = jax.device_get(scorer(params, batch))
        loss, weight = scores.loss, scores.weight
        np.testing.assert_array_equal(weight[:, -1], 0.0)
        np.testing.assert_array_equal(scores.place, np.tile(np.arange(L), (B, 1)))
        assert weight.sum() == B * (L - 1)
        acc = metrics.Accumulator(metrics.bucket_edges(4, L))
        acc.add(*scores)
        s = acc.summary(causal=True)
        np.testing.assert_allclose(s["overall"]["perplexity"], np.exp(s["overall"]["loss"]))
        sums.append(loss)
    # the first window sees the same context either way; later windows see less when cut
    np.testing.assert_allclose(sums[0][:, :4], sums[1][:, :4], rtol=1e-5, atol=1e-6)
    assert not np.allclose(sums[0][:, 4:], sums[1][:, 4:])


def full_logits_scorer(graphdef, treedef):
    """The evaluator's previous MLM scorer, kept here as the reference: full-vocabulary logits
    at EVERY place, weights applied afterwards ([B, L] per place, bucketed by column)."""
    from posjax.training.state import to_params_state

    def score(params, batch):
        model = nnx.merge(graphdef, to_params_state(treedef, params))
        h = model.encoder(batch, deterministic=True)
        logits = model.lm_head(h, model.encoder.embeddings.word).astype(jnp.float32)
        targets, w = batch["mlm_targets"], batch["mlm_weights"].astype(jnp.float32)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
        correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
        return loss * w, correct * w, w

    return jax.jit(score)


def test_mlm_scores_at_masked_places_equal_full_logits_and_refuse_drops():
    config = tiny_config("alibi")
    config.model.vocab_size = 50
    model = models.build_model(config, nnx.Rngs(params=1))
    graphdef, params_state = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(params_state)
    treedef = jax.tree.structure(params_state)
    B, L = 3, 40
    bound = 6  # masking.max_predictions(40, 0.15): the places the head runs at per row
    rng = np.random.default_rng(1)
    weights = np.zeros((B, L), np.float32)
    for b, n in enumerate((bound, 2, 0)):  # a full row, a sparse one and (padding) none
        weights[b, rng.choice(np.arange(1, L - 1), n, replace=False)] = 1.0
    ids = rng.integers(5, 50, (B, L)).astype(np.int32)
    batch = {"input_ids": np.where(weights > 0, 4, ids).astype(np.int32),
             "token_type_ids": np.zeros((B, L), np.int32),
             "positions": np.tile(np.arange(L, dtype=np.int32), (B, 1)),
             "segment_ids": np.ones((B, L), np.int32),
             "mlm_targets": np.where(weights > 0, ids, 0).astype(np.int32),
             "mlm_weights": weights}
    scorer = metrics.make_scorer(graphdef, treedef, config)
    scores = jax.device_get(scorer(params, batch))
    assert scores.loss.shape == scores.place.shape == (B, bound)  # gathered, not [B, L]
    assert int(scores.dropped) == 0
    for b in range(B):  # every masked place is among the gathered ones, with its column
        scored = scores.place[b][scores.weight[b] > 0]
        np.testing.assert_array_equal(np.sort(scored), np.flatnonzero(weights[b]))
    edges = metrics.bucket_edges(8, L)  # [0, 8, 16, 32, 40]: several buckets
    new, old = metrics.Accumulator(edges), metrics.Accumulator(edges)
    new.add(*scores)
    old.add(*jax.device_get(full_logits_scorer(graphdef, treedef)(params, batch)))
    a, r = new.summary(causal=False), old.summary(causal=False)
    for x, y in zip([a["overall"], *a["buckets"]], [r["overall"], *r["buckets"]]):
        assert x["count"] == y["count"] and x["correct"] == y["correct"]
        np.testing.assert_allclose(x["loss_sum"], y["loss_sum"], rtol=1e-6)
    assert a["overall"]["count"] == bound + 2
    # One prediction more than the bound in a row: it cannot be scored, so the batch is refused.
    extra = np.flatnonzero(weights[0] == 0)[1]
    weights[0, extra] = 1.0
    batch["mlm_targets"][0, extra] = 7
    over = jax.device_get(scorer(params, batch))
    assert int(over.dropped) == 1
    with pytest.raises(RuntimeError, match="fell outside"):
        metrics.Accumulator(edges).add(*over)
