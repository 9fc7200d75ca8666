"""The scoring function on a causal model: next-token targets from the unmasked text, every
position but the last scored, perplexity = exp(mean loss); truncation cuts context only."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from posjax import models
from posjax.evaluation import batches, metrics
from tests.evaluation.fixtures import tiny_config


def test_causal_scoring_counts_every_next_token():
    config = tiny_config("alibi")
    config.model.causal = True
    config.model.vocab_size = 50
    model = models.build_model(config, nnx.Rngs(params=0))
    graphdef, params_state = nnx.split(model, nnx.Param)
    params = nnx.to_pure_dict(params_state)
    scorer = metrics.make_scorer(graphdef, jax.tree.structure(params_state), causal=True)
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
        loss, correct, weight = jax.device_get(scorer(params, batch))
        np.testing.assert_array_equal(weight[:, -1], 0.0)
        assert weight.sum() == B * (L - 1)
        acc = metrics.Accumulator(metrics.bucket_edges(4, L))
        acc.add(loss, correct, weight)
        s = acc.summary(causal=True)
        np.testing.assert_allclose(s["overall"]["perplexity"], np.exp(s["overall"]["loss"]))
        sums.append(loss)
    # the first window sees the same context either way; later windows see less when cut
    np.testing.assert_allclose(sums[0][:, :4], sums[1][:, :4], rtol=1e-5, atol=1e-6)
    assert not np.allclose(sums[0][:, 4:], sums[1][:, 4:])
