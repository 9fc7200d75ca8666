"""posjax.evaluation.run.options: every eval option declared once, and what is made from it."""

from __future__ import annotations

import ml_collections
import pytest

from configs.experiments import common
from posjax.data import heldout
from posjax.errors import ConfigError
from posjax.evaluation.run import batches, options
from posjax.evaluation.run.algorithmic import scoring


def test_every_option_is_a_request_field_with_its_default():
    r = options.Request(out="o")
    for o in options.OPTIONS:
        if o.name != "out":
            expected = list(o.default) if isinstance(o.default, tuple) else o.default
            assert getattr(r, o.name) == expected, o.name
    # list defaults are fresh per request: one request's edit leaves the next alone
    r.alphas.append(0.9)
    assert options.Request(out="o").alphas == [0.2, 0.3, 0.4, 0.45]


def test_other_defaults_are_read_from_the_options():
    assert batches.Settings().masked_tokens == options.default("masked_tokens")
    assert batches.Settings().batch_tokens == options.default("batch_tokens")
    assert batches.Settings().cluster_tokens == options.default("cluster_tokens")
    assert scoring.DEFAULT_SEQUENCES == options.default("sequences") >= 20  # bootstrap clusters
    # the data layer's own defaults (it cannot import evaluation) agree
    assert heldout.DEFAULT_MASKED_TOKENS == options.default("masked_tokens")
    assert heldout.DOCUMENT_CLUSTERS == options.default("cluster_tokens")
    exp = common.experiment("x", {}, lengths=[8], methods=None)
    assert exp.eval.masked_tokens == options.default("masked_tokens")
    assert exp.eval.alphas == options.default("alphas")
    assert common.experiment("x", {}, "tiny", lengths=[8], methods=None).eval.masked_tokens \
        == common.TINY_MASKED_TOKENS


def test_the_recorded_settings_of_each_section():
    r = options.Request(out="o", alphas=(0.4,), tasks=["passkey"])
    text = options.recorded(r, "text", lengths=[64])
    assert set(text) == {
        "lengths", "methods", "alphas", "logn", "masked_tokens", "seed", "batch_tokens",
        "baseline", "rope_factor", "rerope_window", "leaky_factor", "corpus", "data_path",
        "max_documents", "recovery_steps", "recovery_methods", "continue_length",
        "continue_alpha", "continue_seeds", "continue_schedule", "continue_batch_size",
        "cluster_tokens"}
    assert text["alphas"] == [0.4] and text["lengths"] == [64]
    assert options.recorded(r, "tasks") == {"tasks": ["passkey"], "task_rows": 20,
                                            "task_digits": 5}
    assert set(options.recorded(r, "algorithmic")) == {
        "sequences", "seed", "test_dropout", "test_positions", "batch_tokens"}


@pytest.mark.parametrize("field, value, allowed", [
    ("out", "", "an output directory"),
    ("alphas", [0.5], "other than 0.5"),
    ("masked_tokens", 0, "a positive int"),
    ("batch_tokens", 1.5, "a positive int"),
    ("rope_factor", 0.5, "a number >= 1"),
    ("rerope_window", 0, "an int >= 1"),
    ("leaky_factor", 1.0, "a number > 1"),
    ("max_documents", -1, "an int >= 0"),
    ("continue_steps", -1, "an int >= 0"),
    ("continue_schedule", "cosine", "one of constant, linear"),
    ("test_positions", "random", "one of reference, plain"),
])
def test_each_field_check_names_the_field_and_what_it_allows(field, value, allowed):
    r = options.Request(out="o")
    setattr(r, field, value)
    with pytest.raises(ConfigError) as e:
        options.check_fields(r)
    assert e.value.field == field and allowed in str(e.value)


def test_an_experiment_field_no_option_declares_is_refused():
    exp = common.experiment("x", {}, lengths=[8], methods=None)
    options.check_experiment(exp)
    assert options.experiment_value(exp, "lengths") == [8]
    assert options.experiment_value(exp, "seed", missing="m") == "m"  # not settable there
    exp.eval.masked_token = 10  # misspelt
    with pytest.raises(ConfigError) as e:
        options.check_experiment(exp)
    assert e.value.field == "eval.masked_token" and "masked_tokens" in str(e.value)
    options.check_experiment(ml_collections.ConfigDict({"runs": {}}))  # no eval block

