"""posjax.config.validation.validate(config): one call checks every field before anything compiles.

Every config file in configs/ (all variants, every scheme of configs/tiny.py) passes; each bad
value below raises ConfigError naming its field; train.py turns that into one line, exit 2,
with nothing written to the workdir.
"""

import importlib
import os
import subprocess
import sys

import pytest

from configs import base, tiny
from posjax.errors import ConfigError
from posjax.positions import names
from posjax.config.validation import validate
from tests.reliability import runner

CONFIG_FILES = sorted(n[:-3] for n in os.listdir(os.path.join(runner.REPO, "configs"))
                      if n.endswith(".py") and n not in ("__init__.py", "tiny.py", "workdir.py"))


@pytest.mark.parametrize("name", CONFIG_FILES)
def test_every_config_file_validates(name):
    module = importlib.import_module(f"configs.{name}")
    for variant in ("", "tiny", "base"):
        validate(module.get_config(variant))


def test_every_scheme_tiny_config_validates():
    for scheme in names():
        validate(tiny.get_config(scheme))


def _tiny(**changes):
    config = base.get_config("tiny")
    with config.unlocked():
        for path, value in changes.items():
            section, _, field = path.rpartition(".")
            target = config
            for part in filter(None, section.split(".")):
                target = target[part]
            if field in target and value is not None and target[field] is not None and \
                    type(target[field]) is not type(value):
                target.__setattr__(field, None)  # ConfigDict is typed; a test may change types
            target[field] = value
    return config


BAD = [
    ("train.steps", 0), ("train.learning_rate", 0.0), ("train.learning_rate", -1e-3),
    ("train.learning_rate", float("nan")), ("train.warmup_steps", 4),  # tiny: steps=4
    ("train.clip_norm", -1.0), ("train.weight_decay", -0.1), ("train.b2", 1.0),
    ("train.eps", 0.0), ("train.checkpoint_every", 0), ("train.keep_checkpoints", 0),
    ("train.log_every", 0), ("train.eval_every", -1), ("train.nan_policy", "ignore"),
    ("model.num_heads", 5), ("model.hidden", 0), ("model.dtype", "float16"),
    ("model.dropout", 1.0), ("model.attention", "flash"), ("model.max_length", 16),
    ("data.seq_len", 2), ("data.batch_size", 0), ("data.corpus", "wiki"),
    ("data.tokenizer", "bpe"), ("data.mask_rate", 0.0), ("data.heldout_fraction", 1.0),
    ("data.max_documents", 0), ("data.vocab_size", 3), ("data.randomized_max_length", 8),
    ("mesh.data", 0), ("mesh.tensor", -2),
    ("model.mlp", "swiglu"), ("model.attention_bias", "no"), ("model.head_activation", "tanh"),
    ("model.first_attention_norm", False),  # tiny is post-LN
]


@pytest.mark.parametrize("field,value", BAD, ids=[f"{f}={v}" for f, v in BAD])
def test_bad_value_names_its_field(field, value):
    with pytest.raises(ConfigError) as e:
        validate(_tiny(**{field: value}))
    # model.max_length=16 < data.seq_len=32 is reported on data.seq_len (the pair conflicts)
    expected = "data.seq_len" if field == "model.max_length" else field
    assert e.value.field == expected, (e.value.field, str(e.value))
    assert repr(value)[:6] in str(e.value) or field == "model.max_length"


def test_scheme_fields_are_checked():
    config = _tiny()
    config.position = base.position("rope")
    config.model.head_dim = 7  # RoPE rotates pairs: the head dimension must be even
    with pytest.raises(ConfigError, match="head_dim|rope"):
        validate(config)
    config = _tiny()
    config.position = base.position("hierarchical", alpha=0.5)  # (i, j) and (j, i) collide
    with pytest.raises(ConfigError, match="alpha"):
        validate(config)


def test_text_dir_path_must_exist(tmp_path):
    with pytest.raises(ConfigError) as e:
        validate(_tiny(**{"data.corpus": "text_dir", "data.path": str(tmp_path / "missing")}))
    assert e.value.field == "data.path"


def test_unknown_keys_are_refused():
    config = _tiny()
    with config.unlocked():
        config.train.checkpoint_evry = 10  # a typo in a config file
    with pytest.raises(ConfigError) as e:
        validate(config)
    assert e.value.field == "train.checkpoint_evry" and "checkpoint_every" in str(e.value)
    config = _tiny()
    with config.unlocked():
        config.trian = {}
    with pytest.raises(ConfigError) as e:
        validate(config)
    assert e.value.field == "trian"


@pytest.mark.slow
@pytest.mark.parametrize("args,field", [
    (["--config.train.learning_rate=0"], "train.learning_rate"),
    (["--config.train.warmup_steps=9", "--config.train.steps=5"], "train.warmup_steps"),
    (["--config.model.num_heads=3"], "model.num_heads"),
    (["--config.model.mlp=gated"], "model.mlp"),
])
def test_train_py_exits_2_with_one_line(tmp_path, args, field):
    wd = tmp_path / "wd"
    r = subprocess.run([sys.executable, "train.py", "--config=configs/base.py:tiny", *args,
                        f"--workdir={wd}"], cwd=runner.REPO, env=runner.make_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"train.py: error: {field}="), r.stderr
    assert not wd.exists()  # validated before the workdir is touched
