"""model.remat (posjax/models/remat.py): every choice gives the same loss and gradients as no
remat, dropout included (the recomputed forward draws the same masks), with padding and packed
examples; the rematerialized step really recomputes (more products in its program)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import models, schema
from posjax.models import remat as remat_lib

from tests.models.support import make_batch, model_config


def _loss_and_grads(remat, batch):
    """Loss and parameter gradients of one jitted training step (dropout on), and the number
    of dot products in its compiled-before-optimization program."""
    config = model_config("rope", remat=remat, post_ln=False, dropout=0.1)
    graphdef, state = nnx.split(models.build_model(config, nnx.Rngs(0)))

    def loss(state):
        out = nnx.merge(graphdef, state)(batch, deterministic=False, rngs=nnx.Rngs(dropout=1))
        return jnp.mean(jnp.square(out["hidden"]))

    step = jax.jit(jax.value_and_grad(loss))
    dots = step.lower(state).as_text().count("dot_general")
    value, grads = step(state)
    return value, jax.tree.leaves(grads), dots


@pytest.mark.slow
def test_remat_choices_give_the_same_loss_and_gradients():
    batch = make_batch(segments=[10, 4], real=14)  # two packed examples, then padding
    base, base_grads, base_dots = _loss_and_grads(None, batch)
    for remat in ("layer", "full"):
        value, grads, dots = _loss_and_grads(remat, batch)
        np.testing.assert_allclose(value, base, rtol=1e-6, err_msg=remat)
        assert len(grads) == len(base_grads)
        for g, b in zip(grads, base_grads):
            np.testing.assert_allclose(g, b, rtol=1e-5, atol=1e-7, err_msg=remat)
        assert dots > base_dots, remat  # the backward recomputes the layers' products


def test_the_schema_offers_exactly_the_remat_choices():
    assert schema.REMAT == remat_lib.CHOICES
