"""posjax.schema: every config field declared once, and nothing else carries a default.

Pure Python, no JAX compile: the declarations themselves, the default ConfigDict they build,
the typing and suggestions of `--config.*` overrides, the one-line checks, the read-only view
(and the defaults it gives a config saved before a field existed), and an AST scan of the
package, the entry points and configs/ for config reads that carry their own default.
"""

from __future__ import annotations

import ast
import pathlib
import re

import ml_collections
import pytest

from posjax import mesh_rules, schema
from posjax.config import defaults, overrides
from posjax.data import CORPORA, TOKENIZERS
from posjax.data.tasks import DIGITS
from posjax.errors import ConfigError
from posjax.models import spec
from posjax.config.overrides import Override
from posjax.training.optimizer import SCHEDULES
from posjax.config.validation import validate

ROOT = pathlib.Path(__file__).resolve().parents[2]


# -- the declarations ---------------------------------------------------------------------------
@pytest.mark.parametrize("field", schema.FIELDS, ids=lambda f: f.path)
def test_every_field_has_a_type_doc_and_a_check_its_default_passes(field):
    assert field.kind in (int, float, bool, str, tuple, dict)
    assert field.doc.strip() and "\n" not in field.doc
    assert field.allowed.strip() and callable(field.ok)
    assert field.ok(field.default), (field.path, field.default)
    assert field.section in ("",) + schema.SECTIONS


def test_checks_refuse_a_wrong_type():
    for field in schema.FIELDS:
        if field.kind in (int, float, bool):
            assert not field.ok("seven"), field.path
        if field.kind is str:
            assert not field.ok(7), field.path


def test_every_path_is_declared_once():
    paths = [f.path for f in schema.FIELDS]
    assert len(paths) == len(set(paths))
    assert set(schema.KNOWN) == set(schema.SECTIONS) - {"position"}


def test_the_names_the_implementations_serve_are_the_schema_s():
    assert tuple(spec.ACTIVATIONS) == schema.ACTIVATIONS
    assert tuple(spec.DTYPES) == schema.DTYPES
    assert spec.MLP_KINDS == schema.MLP_KINDS
    assert tuple(mesh_rules.PRESETS) == schema.PRESETS
    assert mesh_rules.DEFAULT_PRESET == schema.field("mesh.preset").default
    assert CORPORA == schema.CORPORA and TOKENIZERS == schema.TOKENIZERS
    assert SCHEDULES == schema.SCHEDULES
    assert DIGITS == schema.field("data.task_digits").default


# -- the default ConfigDict ---------------------------------------------------------------------
def test_default_config_holds_exactly_the_in_defaults_fields():
    config = defaults.get_config()
    for section, keys in schema.KNOWN.items():
        expected = {f.key for f in schema.FIELDS if f.section == section and f.in_defaults}
        assert set(config[section].keys()) == expected, section
    assert set(config.keys()) == set(schema.TOP_LEVEL)
    assert config.position.name == "learned"
    # placeholders keep their declared type, so ConfigDict still types the None fields
    assert config.model.get_type("vocab_size") is int
    assert config.data.get_type("max_documents") is int


@pytest.mark.parametrize("variant", defaults.VARIANTS)
def test_every_variant_passes_every_check(variant):
    schema.check_all(defaults.get_config(variant))


# -- checks -------------------------------------------------------------------------------------
@pytest.mark.parametrize("path, value, allowed", [
    ("train.schedule", "cosine", "one of linear, constant"),
    ("train.eval_every", -1, "an int >= 0 (0 = no evaluation)"),
    ("data.split_seed", "x", "an int"),
    ("model.dropout", 1.5, "a float in [0, 1)"),
    ("mesh.preset", "zero", "one of 'data', 'fsdp', 'fsdp_tp'"),
])
def test_validate_names_field_value_and_what_is_allowed(path, value, allowed):
    config = defaults.get_config("tiny")
    section, key = path.split(".")
    config[section][key] = value
    with pytest.raises(ConfigError) as e:
        validate(config)
    assert str(e.value) == f"{path}={value!r} is not allowed: {allowed}"


# -- overrides ----------------------------------------------------------------------------------
def test_overrides_are_typed_by_the_schema():
    config = defaults.get_config("tiny")
    overrides.apply(config, [Override("data.split_seed", "3"), Override("train.schedule", "constant"),
                             Override("train.no_decay", "('bias$',)"),
                             Override("data.randomized_eval", None)])
    assert config.data.split_seed == 3 and type(config.data.split_seed) is int
    assert config.train.schedule == "constant"
    assert config.train.no_decay == ("bias$",)
    assert config.data.randomized_eval is True
    with pytest.raises(ConfigError, match=r"^--config\.data\.split_seed='1\.5' is not allowed: an int$"):
        overrides.apply(config, [Override("data.split_seed", "1.5")])


@pytest.mark.parametrize("field", [f for f in schema.FIELDS if f.default is not None
                                   and f.kind in (int, float, bool, str)], ids=lambda f: f.path)
def test_every_typed_field_takes_its_default_from_the_command_line(field):
    config = defaults.get_config("tiny")
    overrides.apply(config, [Override(field.path, str(field.default))])
    value = schema.value(config, field.path)
    assert value == field.default and type(value) is field.kind


@pytest.mark.parametrize("typo, meant", [
    ("train.warmup_step", "train.warmup_steps"),
    ("data.split_sed", "data.split_seed"),  # optional: the config file does not set it
    ("train.schedul", "train.schedule"),
])
def test_unknown_keys_name_the_nearest_declared_ones(typo, meant):
    with pytest.raises(ConfigError) as e:
        overrides.apply(defaults.get_config("tiny"), [Override(typo, "1")])
    assert meant in str(e.value).split("nearest valid keys:")[1]


def test_a_config_file_typo_names_the_nearest_declared_field():
    config = defaults.get_config("tiny")
    config.train.checkpoint_evry = 10
    with pytest.raises(ConfigError) as e:
        validate(config)
    assert str(e.value).startswith("train.checkpoint_evry=10 is not allowed: a known train field "
                                   "(nearest: checkpoint_every")


# -- the view -----------------------------------------------------------------------------------
def test_view_is_read_only_and_complete():
    view = schema.view(defaults.get_config("tiny"))
    assert view.train.schedule == "linear" and view.data.split_seed == 0
    assert view.train.steps == 4  # what the config says wins over the default
    with pytest.raises((AttributeError, TypeError, ValueError)):
        view.train.steps = 5
    assert schema.view(view) is view


def test_a_config_saved_before_a_field_existed_reads_its_default():
    """config.json of an older run: no model.attention_sinks, no layout fields, no train.eval_*;
    the view fills them with the declared defaults and the model spec validates."""
    saved = defaults.get_config("tiny").to_dict()
    for key in ("attention_sinks", "local_window", "global_every", "global_first", "nope_every",
                "local_position", "mlp", "head_activation"):
        del saved["model"][key]
    del saved["train"]["eval_every"], saved["train"]["eval_batches"]
    saved["model"]["vocab_size"] = 50
    config = ml_collections.ConfigDict(saved)
    view = schema.view(config)
    assert view.model.attention_sinks is False and view.model.local_window is None
    assert view.train.eval_every == 200 and view.train.eval_batches == 4
    model = spec.validate_model_config(config, require_vocab=True)
    assert (model.attention_sinks, model.local_window, model.mlp) == (False, None, "dense")
    assert model.head_activation == "gelu"
    assert model.dropout == 0.1


def test_given_is_what_the_config_says_not_the_default():
    config = defaults.get_config("tiny")
    assert schema.given(config, "data.split_seed") is None
    assert schema.value(config, "data.split_seed") == 0
    assert schema.given(None, "data.corpus") is None


# -- no read site carries a default -------------------------------------------------------------
# A config object, by name: config / cfg / mesh_config / model_config, optionally followed by a
# section (`config.train`, `run.config.model`); or a bare section name reading a declared key.
CONFIG_RECEIVER = re.compile(
    r"^(.*\.)?(config|cfg|mesh_config|model_config)(\.(model|data|train|mesh|position))?$")
SECTION_NAMES = {"m", "d", "t", "model", "data", "train", "mesh", "position"}
CONFIG_KEYS = {f.key for f in schema.FIELDS} | set(schema.TOP_LEVEL)
# Reads that are not of a posjax training config, with why.
NOT_A_TRAINING_CONFIG = {
    # a kernel case's position config: its fields and defaults are the scheme dataclass's
    # (posjax.positions registry), not the training schema's
    ("posjax/kernels/cases.py", "config.get('bidirectional')"),
}


def config_reads_with_defaults(source: str) -> list:
    """`x.get(...)` and 3-argument `getattr(x, ...)` calls on config objects in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "get":
            receiver, key = func.value, node.args[0]
        elif isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) == 3:
            receiver, key = node.args[0], node.args[1]
        else:
            continue
        name = ast.unparse(receiver)
        literal = key.value if isinstance(key, ast.Constant) else None
        if CONFIG_RECEIVER.match(name) or (name in SECTION_NAMES and literal in CONFIG_KEYS):
            found.append(ast.unparse(node))
    return found


def test_the_scan_finds_config_reads_and_nothing_else():
    source = """
config.train.get("steps", 1)
run.config.model.get("causal", False)
cfg.get("mesh", None)
m.get("head_dim")
getattr(config.data, "path", "")
results.get("runs", {})
batch.get("positions")
m.get("mlm_dropped", 0.0)
"""
    assert config_reads_with_defaults(source) == [
        "config.train.get('steps', 1)", "run.config.model.get('causal', False)",
        "cfg.get('mesh', None)", "m.get('head_dim')", "getattr(config.data, 'path', '')"]


def test_no_read_site_carries_a_config_default():
    files = sorted([*ROOT.joinpath("posjax").rglob("*.py"), ROOT / "train.py", ROOT / "eval.py",
                    *ROOT.joinpath("configs").rglob("*.py")])
    found = {(str(path.relative_to(ROOT)), call) for path in files
             for call in config_reads_with_defaults(path.read_text())}
    assert found == NOT_A_TRAINING_CONFIG
