"""Extended models equal the original below the original length (and serve longer inputs,
through the chunked attention path too); a workdir round trip changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from tests.convert.conftest import ARCHS, LENGTH, real
from tests.convert.test_parity import TOL, posjax_inputs


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
