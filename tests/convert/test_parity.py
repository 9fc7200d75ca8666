"""Converted tiny random HF models reproduce torch: hidden states and MLM logits (float32,
max abs error <= 1e-4 at real tokens, with padding and token types), the extended model
equals the original below the original length, and a workdir round trip changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from tests.convert.conftest import ARCHS, LENGTH, real

TOL = 1e-4


def posjax_inputs(case):
    model = case.model
    return model.hf_to_posjax(case.ids), case.mask, case.types


@pytest.mark.parametrize("arch", ARCHS)
def test_matches_torch(cases, arch):
    case = cases[arch]
    model = case.model
    ids, mask, types = posjax_inputs(case)
    hidden = model.encode(ids, mask, types)
    np.testing.assert_allclose(real(hidden, mask), real(case.hidden, mask), atol=TOL, rtol=0)
    logits = model.mlm_logits(ids, mask, types)
    torch_logits = case.logits
    if model.hf_ids is not None:  # posjax column j is HF id hf_ids[j]
        torch_logits = torch_logits[..., model.hf_ids]
    np.testing.assert_allclose(real(logits, mask), real(torch_logits, mask), atol=TOL, rtol=0)
    assert np.abs(real(case.logits, mask)).max() > 1.0  # the comparison is not trivially small


def test_bert_vocab_reordered_for_posjax(cases):
    """[PAD] [UNK] [CLS] [SEP] [MASK] become ids 0..4; the posjax wordpiece tokenizer loads it
    and maps HF ids of those tokens onto its own special ids."""
    model = cases["bert"].model
    tok = model.tokenizer
    assert tok is not None and tok.name == "wordpiece"
    assert tok.vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert list(model.hf_to_posjax([0, 7, 8, 9, 10])) == [0, 1, 2, 3, 4]
    assert model.hf_ids[tok.token_to_id["w3"]] == 14  # every other token keeps its HF order


def test_albert_sop_head(cases):
    case = cases["albert"]
    ids, mask, types = posjax_inputs(case)
    batch = case.model.batch(ids, mask, types)
    from flax import nnx

    out = nnx.merge(case.model._graphdef, case.model._state)(batch)
    np.testing.assert_allclose(np.asarray(out["sop_logits"]), case.sop, atol=TOL, rtol=0)


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
