"""model.dtype='bfloat16' really runs bf16 matmuls: the COMPILED train step holds dot products
with bf16 operands (accumulated in float32), and the float32 step holds none.

Before bf16 inputs were accumulated in float32, Dense multiplied bf16 by bf16 into bf16 and
XLA:CPU converted both operands back to float32: the program had no bf16 dot at all, and the
loss was bit-identical to float32's. Reading the compiled HLO is what catches that.
"""

from __future__ import annotations

import re
import pytest

import jax
import numpy as np

from posjax import models
from posjax.data.random_batch import random_batch
from posjax.training import sharding, state as state_lib
from posjax.training.optimizer import make_optimizer

from tests.training.conftest import load_config

_DEF = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*(\w+)\[")
_DOT = re.compile(r"\s(?:dot|convolution)\(([^)]*)\)")


def dot_operand_dtypes(hlo: str) -> list[tuple[str, ...]]:
    """The operand dtypes of every dot in an HLO module's text (names are module-unique)."""
    dtype = {}
    for line in hlo.splitlines():
        m = _DEF.match(line)
        if m:
            dtype[m.group(1)] = m.group(2)
    dots = []
    for line in hlo.splitlines():
        m = _DOT.search(line)
        if m and _DEF.match(line):
            names = [a.strip().lstrip("%") for a in m.group(1).split(",")]
            dots.append(tuple(dtype.get(n, "?") for n in names))
    return dots


def compiled_step_hlo(dtype: str) -> str:
    """The compiled tiny train step's HLO text, after running it once."""
    config = load_config()
    config.model.vocab_size = 120
    config.model.dtype = dtype
    config.model.dropout = 0.0
    mesh = sharding.make_mesh(config.mesh)
    rules = sharding.logical_rules(config.mesh)
    setup = state_lib.make_setup(config, mesh, rules, models.build_model, make_optimizer)
    state = setup.init_fn()
    batch = random_batch(config, np.random.default_rng(0))
    batch_sh = state_lib.batch_shardings(batch, mesh)
    step = state_lib.make_train_step(setup, config, batch_sh)
    compiled = step.lower(state, jax.device_put(batch, batch_sh)).compile()
    text = compiled.as_text()
    # It must also RUN: XLA:CPU compiles bf16 x bf16 -> f32 dots that only YNNPACK fusions can
    # execute, and raises at run time for any other (posjax.tiling.mixed).
    state, metrics = compiled(state, jax.device_put(batch, batch_sh))
    assert np.isfinite(float(metrics["loss"]))
    # Parameters and optimizer state stay float32 whatever the compute dtype.
    leaves = jax.tree.leaves((state["params"], state["opt_state"]))
    assert all(x.dtype == jax.numpy.float32 for x in leaves if x.ndim), \
        {x.dtype for x in leaves}
    return text


@pytest.mark.slow
def test_compiled_bf16_step_has_bf16_dots_and_float32_has_none():
    bf16_dots = dot_operand_dtypes(compiled_step_hlo("bfloat16"))
    f32_dots = dot_operand_dtypes(compiled_step_hlo("float32"))
    assert f32_dots and bf16_dots
    assert not any("bf16" in d for d in f32_dots), f32_dots
    both_bf16 = [d for d in bf16_dots if d == ("bf16", "bf16")]
    # The projections, the MLP, the attention einsums and the tied head, forward and backward:
    # far more than a handful. A regression to bf16 x bf16 -> bf16 leaves none.
    assert len(both_bf16) >= 20, bf16_dots
