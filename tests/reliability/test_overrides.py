"""Every bad `--config.*` override is one ConfigError line, for train.py and eval.py alike.

In-process (hypothesis): misspelled keys, values of the wrong type and values out of range,
drawn across every section of a training config, go through the same path the entry points
use (posjax.config.overrides.apply, then posjax.config.validation.validate) and must end in one one-line
ConfigError naming the flag or field. Then a handful of real train.py / eval.py runs: exit 2,
one line on stderr, no traceback, and the workdir / output directory untouched.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posjax.config import defaults, overrides
from posjax.errors import ConfigError
from posjax.config.overrides import Override
from posjax.config.validation import validate
from tests.reliability import runner

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _config():
    """A tiny RoPE run: every section, and a position scheme with many optional fields."""
    config = defaults.get_config("tiny")
    config.position = defaults.position("rope")
    return config


VALID = overrides.leaf_paths(_config())
SECTIONS = sorted({p.split(".", 1)[0] for p in VALID})
assert {"seed", "model", "position", "data", "train", "mesh"} <= set(SECTIONS)


def _one_line(error: ConfigError) -> str:
    text = str(error)
    assert "\n" not in text and text.strip() == text and text, repr(text)
    return text


def _typed_paths(kind):
    config = _config()
    out = []
    for path in VALID:
        node, key, found = overrides._resolve(config, path, None)
        if found is kind:
            out.append(path)
    return sorted(out)


# -- misspelled keys ----------------------------------------------------------------------------
@st.composite
def misspelled(draw):
    path = draw(st.sampled_from(VALID))
    head, _, last = path.rpartition(".")
    i = draw(st.integers(0, len(last)))
    letter = draw(st.sampled_from("abcdefghijklmnopqrstuvwxyz_"))
    op = draw(st.sampled_from(("insert", "delete", "replace", "swap")))
    if op == "insert":
        last2 = last[:i] + letter + last[i:]
    elif op == "delete" and i < len(last):
        last2 = last[:i] + last[i + 1:]
    elif op == "replace" and i < len(last):
        last2 = last[:i] + letter + last[i + 1:]
    elif op == "swap" and i + 1 < len(last):
        last2 = last[:i] + last[i + 1] + last[i] + last[i + 2:]
    else:
        last2 = last + letter
    typo = f"{head}.{last2}" if head else last2
    if draw(st.booleans()):  # misspell the section instead, sometimes
        section = typo.split(".", 1)[0]
        typo = typo.replace(section, section[:-1] + "x", 1) if len(section) > 1 else typo
    return path, typo


@SETTINGS
@given(misspelled(), st.text(min_size=1, max_size=8))
def test_misspelled_key_is_one_line_naming_it_and_neighbours(case, value):
    path, typo = case
    if typo in VALID or not typo or typo.startswith(".") or typo.endswith("."):
        return
    with pytest.raises(ConfigError) as e:
        overrides.apply(_config(), [Override(typo, value)])
    text = _one_line(e.value)
    assert f"--config.{typo}=" in text and "valid keys" in text, text
    last = path.rsplit(".", 1)[-1]
    if len(last) >= 5 and typo.split(".", 1)[0] == path.split(".", 1)[0]:
        assert path in text, text  # a one-letter slip suggests the key that was meant


# -- wrong types ----------------------------------------------------------------------------------
INT_PATHS, FLOAT_PATHS, BOOL_PATHS = _typed_paths(int), _typed_paths(float), _typed_paths(bool)
WORDS = st.text("abcdefghijklmnopqrstuvwxyz!@%", min_size=1, max_size=8).filter(
    lambda t: t.lower() not in overrides.TRUE + overrides.FALSE + overrides.NONE
    and t.lower() not in ("inf", "nan", "infinity"))


@SETTINGS
@given(st.one_of(
    st.tuples(st.sampled_from(INT_PATHS), st.one_of(WORDS, st.floats(0.1, 99.9).map(str))),
    st.tuples(st.sampled_from(FLOAT_PATHS), WORDS),
    st.tuples(st.sampled_from(BOOL_PATHS), st.one_of(WORDS, st.integers(2, 99).map(str))),
))
def test_wrong_type_is_one_line(case):
    path, value = case
    config = _config()
    with pytest.raises(ConfigError) as e:
        overrides.apply(config, [Override(path, value)])
    assert _one_line(e.value).startswith(f"--config.{path}={value!r} is not allowed: ")


# -- out of range -----------------------------------------------------------------------------
def _neg(high=0):
    return st.integers(-10**6, high).map(str)


OUT_OF_RANGE = {
    "seed": st.sampled_from(["1.5", "'x'"]),  # seed has no fixed type in the config: literal
    "model.num_layers": _neg(), "model.mlp_dim": _neg(), "model.max_length": _neg(),
    "model.dropout": st.floats(1.0, 1e6).map(str), "model.dtype": WORDS,
    "model.activation": WORDS, "model.attention": WORDS, "model.block_q": _neg(),
    "position.scaling": WORDS, "position.base": st.floats(-1e6, 0.0).map(str),
    "data.seq_len": _neg(2), "data.batch_size": _neg(), "data.corpus": WORDS,
    "data.tokenizer": WORDS, "data.mask_rate": st.floats(1.0, 1e6).map(str),
    "data.heldout_fraction": st.floats(-1e6, -1e-3).map(str), "data.vocab_size": _neg(5),
    "train.steps": _neg(), "train.learning_rate": st.floats(-1e6, 0.0).map(str),
    "train.b1": st.floats(1.0, 1e6).map(str), "train.eps": st.floats(-1e6, 0.0).map(str),
    "train.log_every": _neg(), "train.keep_checkpoints": _neg(), "train.nan_policy": WORDS,
    "train.weight_decay": st.floats(-1e6, -1e-3).map(str),
    "mesh.data": st.integers(-10**6, -2).map(str), "mesh.fsdp": _neg(),
    "mesh.preset": WORDS,
}


@SETTINGS
@given(st.sampled_from(sorted(OUT_OF_RANGE)).flatmap(
    lambda p: st.tuples(st.just(p), OUT_OF_RANGE[p])))
def test_out_of_range_is_one_line_naming_the_field(case):
    path, value = case
    config = _config()
    with pytest.raises(ConfigError) as e:
        overrides.apply(config, [Override(path, value)])
        validate(config)
    text = _one_line(e.value)
    assert path in text or (path == "model.block_q" and "block" in text), text


def test_every_section_is_covered():
    assert {p.split(".", 1)[0] for p in OUT_OF_RANGE} == set(SECTIONS)
    for kind_paths in (INT_PATHS, FLOAT_PATHS, BOOL_PATHS):
        assert kind_paths


def test_good_overrides_apply():
    config = _config()
    overrides.apply(config, [Override("train.steps", "7"), Override("model.causal", None),
                             Override("position.scaling", "ntk"), Override("mesh.rules",
                             "(('mlp', 'tensor'),)"), Override("data.split_seed", "3"),
                             Override("model.logn_length", "32"), Override("train.b1", "0")])
    validate(config)
    assert (config.train.steps, config.model.causal, config.position.scaling) == (7, True, "ntk")
    assert config.mesh.rules == (("mlp", "tensor"),) and config.data.split_seed == 3
    assert config.model.logn_length == 32 and config.train.b1 == 0.0


def test_split_argv_forms():
    rest, found = overrides.split_argv(["prog", "--config=c.py", "--config.train.steps=3",
                                        "--config.data.path", "dir", "--noconfig.model.causal",
                                        "--workdir=w", "--config.model.sop"])
    assert rest == ["prog", "--config=c.py", "--workdir=w"]
    assert found == [Override("train.steps", "3"), Override("data.path", "dir"),
                     Override("model.causal", None, True), Override("model.sop", None)]


# -- real entry points ------------------------------------------------------------------------
def _snapshot(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("script,args,named", [
    ("train.py", ["--config=configs/nezha.py:tiny", "--config.no_such_field=1"],
     "--config.no_such_field="),
    ("train.py", ["--config=configs/nezha.py:tiny", "--config.model.hiden=64"],
     "model.hidden"),
    ("eval.py", ["--config=configs/experiments/logn.py:tiny", "--config.eval.num_docs=many"],
     "--config.eval.num_docs='many'"),
])
def test_entry_point_exits_2_one_line_nothing_written(tmp_path, script, args, named):
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "keep.txt").write_text("untouched\n")
    before = _snapshot(workdir)
    where = [f"--workdir={workdir}"] if script == "train.py" else [f"--out={workdir / 'out'}"]
    r = subprocess.run([sys.executable, script, *args, *where], cwd=runner.REPO,
                       env=runner.make_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script}: error: ") and named in lines[0], \
        r.stderr
    assert _snapshot(workdir) == before
