"""Extended models equal the original below the original length (and serve longer inputs,
through the chunked attention path too); a workdir round trip changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from tests.convert.conftest import ARCHS, LENGTH, real
from tests.convert.test_parity import TOL, posjax_inputs


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_extended_equals_original_below_original_length(cases, arch):
    case = cases[arch]
    ids, mask, types = posjax_inputs(case)
    long = case.model.extend(256)
    assert long.config.model.max_length == 256
    if case.model.config.position.name == "learned":
        assert long.config.position.name == "hierarchical"
        assert long.config.position.rows == case.model.config.model.max_length
    short = long.encode(ids, mask, types)
    np.testing.assert_allclose(real(short, mask), real(case.hidden, mask), atol=TOL, rtol=0)
    # ... and it serves positions past the original table (64): 160 tokens, finite outputs.
    tiled = np.tile(ids[:1], (1, 160 // LENGTH + 1))[:, :160]
    out = long.encode(tiled)
    assert out.shape == (1, 160, 32) and np.isfinite(out).all()


def test_learned_refuses_past_table_without_extension(cases):
    from posjax.errors import ConfigError

    model = cases["bert"].model
    with pytest.raises(ConfigError, match="extend"):
        model.encode(np.zeros((1, 65), np.int32))


@pytest.mark.slow
def test_extended_chunked_equals_reference(cases):
    """The chunked attention path (what long inputs use) agrees with the reference."""
    case = cases["bert"]
    ids, mask, types = posjax_inputs(case)
    long = case.model.extend(4096)
    from posjax.pretrained import Pretrained

    cfg = long.config
    cfg.model.attention, cfg.model.block_q, cfg.model.block_k = "chunked", 8, 8
    chunked = Pretrained(cfg, long.params, vocab=long.vocab, metadata=long.metadata)
    np.testing.assert_allclose(real(chunked.encode(ids, mask, types), mask),
                               real(case.hidden, mask), atol=TOL, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["bert", "nezha", "albert", "deberta-v2"])
def test_workdir_round_trip(cases, arch, tmp_path):
    from posjax import pretrained

    case = cases[arch]
    ids, mask, types = posjax_inputs(case)
    out = case.model.save(str(tmp_path / "wd"))
    again = pretrained.load(out)
    from posjax.training.workdir import config_dict

    assert config_dict(again.config) == config_dict(case.model.config)
    np.testing.assert_allclose(again.encode(ids, mask, types), case.model.encode(ids, mask, types),
                               atol=1e-6, rtol=0)
    assert (again.tokenizer is None) == (case.model.tokenizer is None)


@pytest.mark.slow
def test_rope_extension_methods(cases):
    """RoFormer: dynamic NTK (default) and 'none' keep short inputs identical; linear / NTK /
    YaRN rescale frequencies (so short inputs change, by design) and stay finite."""
    case = cases["roformer"]
    ids, mask, types = posjax_inputs(case)
    for method in ("none", "linear", "ntk", "yarn"):
        long = case.model.extend(256, method=method)
        pos = long.config.position
        assert pos.get("scaling", "none") == method
        assert method == "none" or pos.factor == 4.0
        out = real(long.encode(ids, mask, types), mask)
        assert np.isfinite(out).all()
        err = np.abs(out - real(case.hidden, mask)).max()
        assert (err <= TOL) == (method == "none"), (method, err)


def test_absurd_lengths_are_refused_before_allocating(cases, monkeypatch):
    """extend(100M) and an encode() batch too big for this machine: a ConfigError naming the
    field, the value and the largest value that fits (posjax.memory), before any allocation."""
    import re

    from posjax import memory
    from posjax.errors import ConfigError

    # One reading of the machine's free memory for the whole test: the other test processes
    # allocate and free all the while, and "the limit itself is accepted" below must be
    # judged against the same budget that set the limit.
    free = memory.available_bytes()
    monkeypatch.setattr(memory, "available_bytes", lambda: free)
    model = cases["roformer"].model  # rope: no table size limits the length
    with pytest.raises(ConfigError) as e:
        model.extend(100_000_000)
    message = str(e.value)
    assert message.startswith("max_length=100000000 is not allowed: <= "), message
    limit = int(re.search(r"<= ([\d,]+) on this machine", message).group(1).replace(",", ""))
    assert 1_000 < limit < 100_000_000, message
    long = model.extend(limit)  # the limit itself is accepted
    assert long.config.model.max_length == limit
    # encode(): the whole [rows, length] batch is estimated (many rows of an ordinary length)
    need = memory.estimate_bytes(long.config.model, batch=1, length=256,
                                 params_bytes=long._params_bytes())
    rows = int(memory.available_bytes() // need) * 2  # twice what the machine could hold
    ids = np.broadcast_to(np.zeros((1, 256), np.int32), (rows, 256))  # a view: no copy
    with pytest.raises(ConfigError, match=r"^input_ids rows \(of length 256\)=\d+ is not allowed: "
                                          r"<= [\d,]+ on this machine"):
        long.encode(ids)


def test_extend_scales_the_global_layers_only_as_eval_does():
    """A ModernBERT-style layout: .extend(method=yarn) leaves the local layers' rotation as
    trained (their window never reaches past the training length), like eval.py's yarn."""
    from configs import modernbert
    from posjax.pretrained import extended_config

    config = modernbert.get_config("tiny")
    long = extended_config(config, 4 * int(config.model.max_length), "yarn")
    assert long.position.scaling == "yarn" and long.position.factor == 4.0
    assert long.model.local_position.scaling == "none"
    assert long.model.local_position.factor == 1.0
    assert long.model.local_position.base == 10000.0  # the local layers' own base is kept
    plain = extended_config(modernbert.get_config("tiny"), 64, "none")
    assert plain.model.local_position.to_dict() == {"base": 10000.0}


@pytest.mark.slow
def test_module_is_the_loaded_model_for_a_training_loop(cases):
    """Pretrained.module(): the NNX model holding the loaded weights (not a fresh random
    init), so a user's own loop trains what encode() runs."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    case = cases["bert"]
    ids, mask, types = posjax_inputs(case)
    module = case.model.module()
    batch = case.model.batch(ids, mask, types)
    hidden = module.encoder(batch, deterministic=True)
    # Eager against encode()'s jit: the same weights, float32 rounding apart.
    np.testing.assert_allclose(real(np.asarray(hidden, np.float32), mask),
                               real(case.model.encode(ids, mask, types), mask), atol=1e-5, rtol=0)
    graphdef, state = nnx.split(module)
    grads = jax.grad(lambda s: jnp.mean(nnx.merge(graphdef, s).encoder(
        batch, deterministic=True) ** 2))(state)
    leaves = jax.tree.leaves(grads)
    assert leaves and all(np.isfinite(np.asarray(g)).all() for g in leaves)
    assert any(np.abs(np.asarray(g)).max() > 0 for g in leaves)
