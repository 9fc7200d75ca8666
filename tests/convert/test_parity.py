"""Converted tiny random HF models reproduce torch: hidden states and MLM logits (float32,
max abs error <= 1e-4 at real tokens, with padding and token types)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.convert.conftest import ARCHS, MODERN, VARIANTS, real

TOL = 1e-4


def posjax_inputs(case):
    model = case.model
    return model.hf_to_posjax(case.ids), case.mask, case.types


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS + VARIANTS + MODERN)
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


@pytest.mark.slow
def test_albert_sop_head(cases):
    case = cases["albert"]
    ids, mask, types = posjax_inputs(case)
    batch = case.model.batch(ids, mask, types)
    from flax import nnx

    out = nnx.merge(case.model._graphdef, case.model._state)(batch)
    np.testing.assert_allclose(np.asarray(out["sop_logits"]), case.sop, atol=TOL, rtol=0)


def test_pytorch_bin_reads_like_safetensors(cases, tmp_path):
    """pytorch_model.bin (read with torch) converts to the same params as model.safetensors."""
    import shutil

    import torch
    from safetensors.torch import load_file

    from posjax import pretrained

    src = cases["bert"].hf_dir
    dst = tmp_path / "bin"
    dst.mkdir()
    for name in ("config.json", "vocab.txt"):
        shutil.copy(f"{src}/{name}", dst / name)
    torch.save(load_file(f"{src}/model.safetensors"), dst / "pytorch_model.bin")
    case = cases["bert"]
    ids, mask, types = posjax_inputs(case)
    again = pretrained.load(str(dst))
    np.testing.assert_array_equal(again.encode(ids, mask, types), case.model.encode(ids, mask, types))
