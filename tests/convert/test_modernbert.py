"""ModernBERT beyond parity (tests/convert/test_parity.py): the command line round trip, the
layer-type mapping onto posjax's layout fields, refusals, and .extend() with the RoPE methods."""

from __future__ import annotations

import numpy as np
import pytest

from posjax.convert import modernbert
from posjax.errors import ConfigError

from tests.convert.conftest import LENGTH, real
from tests.convert.test_parity import TOL, posjax_inputs


def _hf_dict(**kw) -> dict:
    """config.json as transformers 5 writes it (layer_types, rope_parameters)."""
    import transformers as T

    return T.ModernBertConfig(vocab_size=99, hidden_size=32, num_attention_heads=4,
                              intermediate_size=37, **kw).to_dict()


def test_cli_writes_a_workdir_that_loads_to_the_same_model(cases, tmp_path):
    from posjax import pretrained
    from posjax.convert.__main__ import main

    case = cases["modernbert"]
    out = tmp_path / "wd"
    assert main(["--hf", case.hf_dir, "--out", str(out)]) == 0
    again = pretrained.load(str(out))
    m = again.config.model
    assert (m.mlp, m.norm_bias, m.first_attention_norm, m.post_ln) == ("glu", False, False, False)
    assert again.config.position.to_dict() == {"name": "rope", "interleaved": False, "base": 500.0}
    ids, mask, _ = posjax_inputs(case)
    np.testing.assert_allclose(real(again.encode(ids, mask), mask), real(case.hidden, mask),
                               atol=TOL, rtol=0)


def test_modernbert_base_layer_pattern_maps_to_layout_fields():
    """22 layers, global on 0, 3, 6, ... (transformers' layer_types), window 128 tokens
    (|i - j| <= 64), local RoPE base apart from the global one."""
    hf = _hf_dict(num_hidden_layers=22, global_attn_every_n_layers=3, local_attention=128,
                  global_rope_theta=160000.0, local_rope_theta=10000.0)
    assert hf["layer_types"][:4] == ["full_attention", "sliding_attention", "sliding_attention",
                                     "full_attention"]
    assert modernbert.layer_fields(hf, 22) == {
        "local_window": 128, "global_every": 3, "global_first": True,
        "local_position": {"base": 10000.0}}
    # Hub configs written before layer_types: the global_attn_every_n_layers rule (default 3).
    legacy = {"num_hidden_layers": 6, "local_attention": 64, "local_rope_theta": 5000.0}
    assert modernbert.layer_fields(legacy, 6) == {
        "local_window": 64, "global_every": 3, "global_first": True,
        "local_position": {"base": 5000.0}}
    assert modernbert.layer_fields(_hf_dict(num_hidden_layers=4, global_attn_every_n_layers=1), 4) == {}


def test_local_layers_map_onto_the_layout_fields():
    hf = _hf_dict(num_hidden_layers=4, global_attn_every_n_layers=2)
    m, position = modernbert.fields(hf)
    assert (m["local_window"], m["global_every"], m["global_first"]) == (128, 2, True)
    assert m["local_position"] == {"base": 10000.0} and position["base"] == 160000.0


@pytest.mark.parametrize("change,field", [
    (dict(layer_types=["sliding_attention", "full_attention", "full_attention",
                       "sliding_attention"]), "config.json:layer_types"),
    (dict(layer_types=["full_attention"] * 3), "config.json:layer_types"),
    (dict(rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 2.0,
                                              "rope_theta": 1e4}}),
     "config.json:rope_parameters.full_attention.rope_type"),
    (dict(hidden_activation="tanh"), "config.json:hidden_activation"),
])
def test_unconvertible_configs_name_the_field(change, field):
    hf = dict(_hf_dict(num_hidden_layers=4, global_attn_every_n_layers=1), **change)
    with pytest.raises(ConfigError) as e:
        modernbert.fields(hf)
    assert e.value.field == field


@pytest.mark.slow
def test_extend_with_rope_methods(cases):
    """The global RoPE base is what the methods scale: dynamic NTK (default) leaves inputs up
    to the original 64 positions unchanged; YaRN and llama3 rescale frequencies for all
    lengths; every method keeps the checkpoint's base and half-split pairing."""
    case = cases["modernbert"]
    ids, mask, _ = posjax_inputs(case)
    for method in ("dynamic_ntk", "linear", "ntk", "yarn", "llama3"):
        pos = case.model.extend(256, method=method).config.position
        assert (pos.scaling, pos.factor, pos.base, pos.interleaved) == (method, 4.0, 500.0, False)
        if method in ("dynamic_ntk", "yarn", "llama3"):
            assert pos.original_length == 64
    default = case.model.extend(256)
    assert default.config.position.scaling == "dynamic_ntk"
    np.testing.assert_allclose(real(default.encode(ids, mask), mask), real(case.hidden, mask),
                               atol=TOL, rtol=0)
    yarn = case.model.extend(256, method="yarn")
    short = real(yarn.encode(ids, mask), mask)
    assert np.abs(short - real(case.hidden, mask)).max() > TOL  # frequencies really changed
    tiled = np.tile(ids[:1], (1, 160 // LENGTH + 1))[:, :160]
    out = yarn.encode(tiled)
    assert out.shape == (1, 160, 32) and np.isfinite(out).all()
