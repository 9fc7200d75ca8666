"""docs/adding_a_scheme.md's example, exactly as documented: its code block becomes a module of
its own (the one file a scheme needs besides its test and an optional config), and the scheme
is then reachable everywhere a user reaches schemes: config fields and overrides, did-you-mean,
model validation, attention, eval.py's methods, Pretrained's extension and `posjax list`."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import math
import os
import pkgutil
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import models, positions
from posjax.__main__ import listing
from posjax.attention import attend
from posjax.errors import ConfigError
from posjax.evaluation import methods
from posjax.evaluation.run.restore import Run
from posjax.config.overrides import Override, apply
from posjax.positions import registry
from posjax.pretrained import extended_config
from tests.models.support import model_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(REPO, "docs", "adding_a_scheme.md")


def example_source() -> str:
    with open(DOC, encoding="utf-8") as f:
        return re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The documented module, imported from a temporary file into a private registry copy."""
    monkeypatch.setattr(registry, "_SCHEMES", dict(registry._SCHEMES))
    path = tmp_path / "log_distance.py"
    path.write_text(example_source())
    spec = importlib.util.spec_from_file_location("log_distance", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LogDistance


def test_the_documented_module_registers_with_its_fields(toy):
    assert positions.scheme_class("log_distance") is toy
    assert positions.config_fields(toy) == {"rate": 1.0}
    assert toy.hook_names() == ("bias",) and not toy.causal_only
    with pytest.raises(ConfigError, match=r"position.rate=-1 .*a number > 0"):
        positions.make({"name": "log_distance", "rate": -1})
    with pytest.raises(ConfigError, match="did you mean log_distance"):
        positions.make("log_distanse")
    config = model_config("log_distance")
    apply(config, [Override("position.rate", "0.5")])  # a typed override from its field
    assert config.position.rate == 0.5
    models.validate_model_config(config)


def test_causal_only_is_one_class_attribute(toy):
    causal = registry.register(dataclasses.make_dataclass(
        "CausalLogDistance", [], bases=(toy,), frozen=True,
        namespace={"name": "causal_log_distance", "causal_only": "a test of the attribute"}))
    dims = positions.Dims(num_heads=2, head_dim=4, hidden=8, max_length=8)
    with pytest.raises(ConfigError, match=r"^model.causal=False .*'causal_log_distance': a test"):
        positions.make("causal_log_distance").bind(dims)
    positions.make("causal_log_distance").bind(dataclasses.replace(dims, causal=True))
    assert "causal_log_distance  (hooks: bias; causal models only)" in listing("schemes")
    assert causal.causal_only and not toy.causal_only


def test_attention_runs_its_bias_on_every_xla_path(toy):
    B, L, H, D = 1, 6, 2, 4
    scheme = positions.make({"name": "log_distance", "rate": 0.7}).bind(
        positions.Dims(num_heads=H, head_dim=D, hidden=H * D, max_length=L))
    q, k, v = jax.random.normal(jax.random.key(0), (3, B, L, H, D))
    i, j = np.ogrid[:L, :L]
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D) - 0.7 * np.log1p(abs(i - j))
    want = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, -1), v)
    for implementation in ("reference", "chunked"):
        got = attend(q, k, v, scheme=scheme, params={}, implementation=implementation,
                     block_q=4, block_k=4)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_its_extension_reaches_eval_and_pretrained(toy):
    config = model_config({"name": "log_distance", "rate": 0.5})
    T = int(config.data.seq_len)
    assert methods.fitting("log_distance") == ["as_is", "truncate", "soften"]
    with pytest.raises(ConfigError, match="did you mean soften"):
        methods.check_methods(["softn"])
    cell = methods.make_cell(Run("toy", "/nonexistent", 0, config, tokenizer=None),
                             methods.Variant("soften"), 4 * T)
    rate = 0.5 * math.log1p(T) / math.log1p(4 * T)
    assert cell.config.position.to_dict() == {"name": "log_distance", "rate": rate}
    assert cell.details["rate"] == rate and cell.config.data.seq_len == 4 * T
    with pytest.raises(methods.NotApplicable, match="no extension 'yarn'"):
        positions.make("log_distance").bind(models.model_dims(config)).extend("yarn", 64)
    # Pretrained.extend counts the original max_length as the trained length.
    M = int(config.model.max_length)
    longer = extended_config(config, 4 * M, "soften")
    assert longer.position.rate == pytest.approx(0.5 * math.log1p(M) / math.log1p(4 * M))
    assert longer.model.max_length == 4 * M


def test_posjax_list_shows_it(toy):
    schemes = listing("schemes")
    assert ("log_distance  (hooks: bias)\n    fields: rate=1.0\n"
            "    methods: as_is, truncate, soften") in schemes
    assert re.search(r"^soften +rate \* log\(1 \+ T\).*\[log_distance\]$", listing("methods"), re.M)


def test_a_module_in_the_package_is_all_it_takes():
    """posjax.positions imports each of its modules, so every Scheme class defined in one is
    registered: dropping the documented module into posjax/positions/ registers it."""
    defined = set()
    for info in pkgutil.iter_modules(positions.__path__):
        module = importlib.import_module(f"posjax.positions.{info.name}")
        defined |= {cls for _, cls in inspect.getmembers(module, inspect.isclass)
                    if issubclass(cls, positions.Scheme) and cls is not positions.Scheme
                    and cls.__module__ == module.__name__}
    assert {positions.scheme_class(n) for n in positions.names()} == defined
