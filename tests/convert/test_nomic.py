"""NomicBERT beyond parity (tests/convert/test_parity.py): transformers' own parameter names
(a state_dict saved without its save-time renaming) convert to the same model, and configs
posjax cannot reproduce name their field."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from posjax.errors import ConfigError

from tests.convert.test_parity import posjax_inputs


def test_transformers_names_convert_like_the_saved_layout(cases, tmp_path):
    import torch
    import transformers as T

    from posjax import pretrained

    case = cases["nomic-bert"]
    torch_model = T.NomicBertForMaskedLM.from_pretrained(case.hf_dir)
    state = torch_model.state_dict()
    assert "nomic_bert.layers.0.mlp.gate_proj.weight" in state  # the in-memory names
    dst = tmp_path / "state_dict"
    dst.mkdir()
    shutil.copy(f"{case.hf_dir}/config.json", dst / "config.json")
    torch.save(state, dst / "pytorch_model.bin")
    ids, mask, types = posjax_inputs(case)
    again = pretrained.load(str(dst))
    np.testing.assert_allclose(again.encode(ids, mask, types),
                               case.model.encode(ids, mask, types), atol=1e-6, rtol=0)


@pytest.mark.parametrize("change,field", [
    ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1000.0}},
     "config.json:rope_parameters.rope_type"),
    ({"hidden_size": None}, "config.json:hidden_size"),  # the remote-code layout (n_embd, ...)
])
def test_unconvertible_configs_name_the_field(cases, change, field):
    from posjax.convert.hf_config import posjax_config

    with open(f"{cases['nomic-bert'].hf_dir}/config.json") as f:
        hf = json.load(f)
    hf.update(change)
    with pytest.raises(ConfigError) as e:
        posjax_config(hf)
    assert e.value.field == field
