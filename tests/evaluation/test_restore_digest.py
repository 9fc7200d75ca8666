"""restore.weights_digest: what a results.json's cells were computed from."""

from __future__ import annotations

import jax.numpy as jnp

from posjax.evaluation.run import restore


def _run(params):
    return restore.Run("r", "/w", 1, config=None, tokenizer=None, params=params)


def test_the_digest_follows_every_leaf_and_nothing_else():
    params = {"a": {"w": jnp.arange(6.0).reshape(2, 3)}, "b": jnp.ones(4, jnp.int32)}
    digest = restore.weights_digest(_run(params))
    assert digest == restore.weights_digest(_run({"b": params["b"], "a": dict(params["a"])}))
    one_ulp = params["a"]["w"].at[1, 2].set(jnp.nextafter(5.0, 6.0))
    assert restore.weights_digest(_run({**params, "a": {"w": one_ulp}})) != digest
    # the same bytes under another name, shape or dtype are other weights
    assert restore.weights_digest(_run({**params, "a": {"v": params["a"]["w"]}})) != digest
    assert restore.weights_digest(_run({**params, "a": {"w": params["a"]["w"].T}})) != digest
    assert restore.weights_digest(
        _run({**params, "b": params["b"].astype(jnp.uint32)})) != digest
