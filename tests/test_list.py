"""`python -m posjax list` / `posjax list`: schemes with their hooks, fields, defaults and
methods; the repository's configs with their corpus and purpose; the methods; the algorithmic
tasks; one-line errors with exit code 2."""

from __future__ import annotations

import os
import re

import pytest

from posjax import positions
from posjax.config import validation
from posjax.data import algorithmic
from posjax.__main__ import config_lines, listing, main
from posjax.errors import ConfigError
from posjax.evaluation import methods
from tests.models.support import model_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_schemes_section_says_what_each_class_declares():
    text = listing("schemes")
    heads = re.findall(r"^(\S+)  \((.*)\)$", text, re.M)
    assert [name for name, _ in heads] == positions.names()
    traits = dict(heads)
    assert traits["rope"] == "hooks: rotate, rotate_values"
    assert traits["xpos"] == "hooks: rotate; causal models only"
    assert traits["rope2d"] == "hooks: rotate; 2-D positions"
    assert traits["fox"] == "hooks: prepare, token_bias"
    assert traits["none"] == "hooks: (none)"
    assert traits["deberta"] == "hooks: content_logits; decoder methods"
    assert "    fields: rows=None, alpha=0.4\n    methods: as_is, truncate, hierarchical, tile," \
        in text
    assert "fields: base=10000.0, interleaved=True, rotary_dim=None" in text


def test_methods_section_lists_every_method_with_its_schemes():
    lines = listing("methods").splitlines()[1:]
    assert [line.split()[0] for line in lines] == list(methods.method_names())
    yarn = next(line for line in lines if line.startswith("yarn "))
    assert yarn.endswith("[resonance, rope]") and "YaRN" in yarn  # Resonance YaRN too
    assert next(line for line in lines if line.startswith("truncate ")).endswith("[every scheme]")


def test_tasks_section_lists_every_algorithmic_task():
    lines = listing("tasks").splitlines()[1:]
    assert [line.split()[0] for line in lines] == algorithmic.names()
    assert "reverse_string  (dcf; 2 input symbols, 2 output classes; input L; output L)" in lines
    assert ("modular_arithmetic  (regular; 9 input symbols, 5 output classes; input L, or L - 1 "
            "when L is even; output 1)") in lines
    assert ("binary_addition  (cs; 3 input symbols, 3 output classes; input L; output L + 1, "
            "masked after the termination token 2)") in lines
    assert "duplicate_string  (cs; 2 input symbols, 2 output classes; input L; output 2L)" in lines


def test_configs_section_reads_corpus_and_purpose(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    lines = config_lines()
    # The purpose is the first sentence after the docstring's 'Corpus:' line ("et al." kept).
    assert "configs/bert.py  [peoples_daily]  BERT (Devlin et al. 2019): learned absolute " \
           "positions added to the embeddings, post-LN" in lines
    assert any(line.startswith("configs/fox.py  [peoples_daily]  FoX, forgetting attention "
                               "(Lin et al. ICLR 2025)") for line in lines)
    assert any(line.startswith("configs/experiments/patches.py  [patches]  ") for line in lines)
    # base.py imports get_config from posjax.config.defaults rather than defining it
    assert any(line.startswith("configs/base.py  [peoples_daily]  The defaults as a config file")
               for line in lines)
    assert not any("common.py" in line for line in lines)  # a helper, not a config
    # workdir.py needs its ':DIR' to load: its docstring's Corpus line stands in, no error text
    assert any(line.startswith("configs/workdir.py  [the one the workdir's config.json names; "
                               "needs its :ARG]") for line in lines)
    assert not any("failed" in line for line in lines)
    # a purpose paragraph that introduces a list ends with ':', its line does not
    assert [line for line in lines if line.endswith(":")] == []
    assert any(line.startswith("configs/rope.py  [peoples_daily]  RoPE, ready for a length-") and
               line.endswith("the defaults are the Rope class's own)") for line in lines)
    monkeypatch.chdir(tmp_path)
    assert config_lines()[0].startswith("no configs/ folder in ")


def test_bad_arguments_are_one_line_and_exit_2(capsys):
    assert main(["list", "schemas"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean schemes?" in err
    assert main([]) == 2 and capsys.readouterr().err.startswith("usage: posjax list")
    assert main(["list", "methods"]) == 0 and "leaky_rerope" in capsys.readouterr().out


def test_did_you_mean_for_scheme_names_and_methods():
    """--config.position.name=ropee: train.py's validation (before any model code) names the
    nearest schemes in its one line; eval.py --methods=yarnn the nearest method."""
    config = model_config("learned")
    config.position.name = "ropee"
    with pytest.raises(ConfigError, match=r"^position.name='ropee' is not allowed: did you mean "
                                          r"rope, .*\? one of alibi, "):
        validation.validate(config)
    with pytest.raises(ConfigError, match=r"did you mean yarn\?"):
        methods.check_methods(["yarnn"])
