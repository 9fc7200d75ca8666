"""Method applicability and the config / params rewrites (no compile, no checkpoint)."""

from __future__ import annotations

import numpy as np
import pytest

from posjax.errors import ConfigError
from posjax.evaluation import methods
from posjax.evaluation.run import metrics
from posjax.positions import scheme_class, tables
from posjax.evaluation.run.restore import Run
from tests.evaluation.fixtures import TRAINED, tiny_config


def fake_run(position="learned", **fields):
    config = tiny_config(position, **fields)
    config.model.vocab_size = 100
    return Run("fake", "/nonexistent", 0, config, tokenizer=None)


def test_applicability_and_defaults():
    assert methods.default_methods("learned") == ["as_is", "truncate", "hierarchical", "tile",
                                                  "interpolate", "stretch", "new_rows"]
    assert methods.applies("tile", "hierarchical") and not methods.applies("stretch", "rope")
    assert methods.default_methods("rope")[0] == "as_is"
    assert set(scheme_class("rope").extend_methods) <= set(methods.default_methods("rope"))
    assert methods.default_methods("t5") == ["as_is"]
    assert methods.applies("none", "rope") and methods.applies("truncate", "alibi")
    assert not methods.applies("yarn", "learned") and not methods.applies("hierarchical", "rope")
    with pytest.raises(methods.NotApplicable, match="not 'rope'"):
        methods.make_cell(fake_run(), methods.Variant("yarn"), 64)
    with pytest.raises(ConfigError, match="methods='bogus'"):
        methods.check_methods(["as_is", "bogus"])
    assert methods.check_methods(["none", "as_is", "ntk"]) == ["as_is", "ntk"]


def test_variants_alpha_sweep_and_logn():
    vs = methods.variants(["as_is", "truncate", "hierarchical"], "learned", alphas=[0.2, 0.4],
                          logn=True)
    labels = [v.label for v in vs]
    assert labels == ["as_is", "as_is+logn", "truncate", "hierarchical(alpha=0.2)",
                      "hierarchical(alpha=0.2)+logn", "hierarchical(alpha=0.4)",
                      "hierarchical(alpha=0.4)+logn"]
    assert len({v.key() for v in vs}) == len(vs)
    # a model trained with log-n already has it: no duplicate +logn rows
    assert [v.label for v in methods.variants(["as_is"], "rope", alphas=[], logn=True,
                                              trained_logn=True)] == ["as_is"]


def test_rope_rewrites():
    run = fake_run("rope")
    cell = methods.make_cell(run, methods.Variant("yarn", logn=True), 4 * TRAINED)
    p = cell.config.position
    assert (p.name, p.scaling, p.factor, p.original_length) == ("rope", "yarn", 4.0, TRAINED)
    assert cell.config.model.logn_length == TRAINED
    assert cell.config.model.max_length == 4 * TRAINED == cell.config.data.seq_len
    assert run.config.position.get("scaling", "none") == "none"  # the run's config is untouched
    fixed = methods.make_cell(run, methods.Variant("linear"), 4 * TRAINED, methods.Options(rope_factor=8.0))
    assert fixed.config.position.factor == 8.0
    dyn = methods.make_cell(run, methods.Variant("dynamic_ntk"), 4 * TRAINED)
    assert (dyn.config.position.factor, dyn.config.position.original_length) == (1.0, TRAINED)
    rr = methods.make_cell(run, methods.Variant("rerope"), 4 * TRAINED)
    assert (rr.config.position.name, rr.config.position.window) == ("rerope", TRAINED // 2)
    leaky = methods.make_cell(run, methods.Variant("leaky_rerope"), 8 * TRAINED)
    k, w = leaky.config.position.leaky_factor, TRAINED // 2
    assert w + (8 * TRAINED - 1 - w) / k < TRAINED  # the farthest distance maps inside training
    big = methods.make_cell(run, methods.Variant("as_is"), 1024)
    assert big.config.model.attention == "rows"  # long inputs on CPU: O(L * block) memory


def test_rope_scalings_leave_local_layers_unscaled():
    """A layered model (local sliding-window layers with their own base): the scalings rescale
    the global layers and leave the local ones as trained; ReRoPE keeps the local base."""
    from posjax import models, positions
    from posjax.models import layout

    run = fake_run("rope", base=160000.0)
    m = run.config.model
    m.num_layers, m.local_window, m.global_every = 3, TRAINED // 2, 3
    m.local_position = {"base": 10000.0}
    for name in ("ntk", "yarn", "linear"):
        cell = methods.make_cell(run, methods.Variant(name), 4 * TRAINED)
        assert (cell.config.position.scaling, cell.config.position.factor) == (name, 4.0)
        spec = models.validate_model_config(cell.config, require_vocab=True)
        bound = positions.make(cell.config.position).bind(models.model_dims(cell.config))
        local = layout.local_scheme(bound, spec.local_position)
        assert (local.scaling, local.factor, local.base) == ("none", 1.0, 10000.0)
        assert bound.scaling == name and bound.base == 160000.0
        assert cell.details["local_layers"] == "unscaled"
    assert dict(run.config.model.local_position) == {"base": 10000.0}  # the run is untouched
    rr = methods.make_cell(run, methods.Variant("rerope"), 4 * TRAINED)
    assert dict(rr.config.model.local_position) == {"base": 10000.0}
    plain = methods.make_cell(fake_run("rope"), methods.Variant("ntk"), 4 * TRAINED)
    assert "local_layers" not in plain.details and not plain.config.model.get("local_position")


def test_learned_rewrites():
    run = fake_run()
    with pytest.raises(methods.NotApplicable, match="rows"):
        methods.make_cell(run, methods.Variant("as_is"), TRAINED + 1)
    with pytest.raises(methods.NotApplicable, match=f"reaches {TRAINED * TRAINED}"):
        methods.make_cell(run, methods.Variant("hierarchical", alpha=0.4), TRAINED * TRAINED + 1)
    h = methods.make_cell(run, methods.Variant("hierarchical", alpha=0.45), TRAINED * TRAINED)
    assert dict(h.config.position) == {"name": "hierarchical", "rows": TRAINED, "alpha": 0.45}
    t = methods.make_cell(run, methods.Variant("truncate"), 64 * TRAINED)
    assert t.window == TRAINED and t.config.model.max_length == TRAINED


def test_hierarchical_cuts_a_longer_table_to_the_trained_rows():
    run = fake_run(rows=4 * TRAINED)  # a 64-row table trained at 16 tokens: rows 16.. untrained
    run.config.model.max_length = 4 * TRAINED
    cell = methods.make_cell(run, methods.Variant("hierarchical", alpha=0.4), 2 * TRAINED)
    assert cell.details["rows"] == TRAINED
    table = np.arange(4 * TRAINED * 3, dtype=np.float32).reshape(4 * TRAINED, 3)
    params = {"encoder": {"embeddings": {"position": {"tree": {"table": table}}, "x": 1}}}
    cut = cell.rewrite(params)
    np.testing.assert_array_equal(cut["encoder"]["embeddings"]["position"]["tree"]["table"],
                                  table[:TRAINED])
    assert params["encoder"]["embeddings"]["position"]["tree"]["table"].shape[0] == 4 * TRAINED


def test_bucket_edges():
    assert metrics.bucket_edges(64, 64) == [0, 64]
    assert metrics.bucket_edges(64, 32) == [0, 32]
    assert metrics.bucket_edges(64, 1000) == [0, 64, 128, 256, 512, 1000]
    acc = metrics.Accumulator([0, 2, 4])
    w = np.array([[1, 0, 1, 1]], np.float32)
    acc.add(np.array([[1.0, 0, 2.0, 3.0]]), np.array([[1.0, 0, 0, 1.0]]), w)
    s = acc.summary(causal=True)
    assert s["overall"]["count"] == 3 and s["overall"]["correct"] == 2
    assert [b["count"] for b in s["buckets"]] == [1, 2]
    np.testing.assert_allclose(s["overall"]["perplexity"], np.exp(2.0))


def test_table_methods_defining_properties():
    n, L = 6, 20
    table = np.random.default_rng(0).standard_normal((n, 4)).astype(np.float32)
    tile = tables.extend(table, L, "tile")
    np.testing.assert_array_equal(tile[n + 3], table[3])
    np.testing.assert_array_equal(tile[:n], table)
    interp = tables.extend(table, L, "interpolate")
    np.testing.assert_array_equal(interp[0], table[0])
    np.testing.assert_array_equal(interp[-1], table[-1])
    x = 7 * (n - 1) / (L - 1)  # row 7 lies between trained rows floor(x) and floor(x) + 1
    f = x - int(x)
    np.testing.assert_allclose(interp[7], (1 - f) * table[int(x)] + f * table[int(x) + 1],
                               rtol=1e-6)
    src = tables.source_rows(L, n, "stretch")
    assert src[0] == 0 and src[-1] == n - 1 and src.min() >= 0 and src.max() <= n - 1
    assert (np.diff(src) >= 0).all()
    np.testing.assert_array_equal(tables.extend(table, L, "stretch"), table[src])
    new = tables.extend(table, L, "new_rows")
    np.testing.assert_array_equal(new[:n], table)
    assert new.shape == (L, 4) and np.abs(new[n:]).max() <= 2 * tables.INIT_STD
    assert np.abs(new[n:]).std() > 0.2 * tables.INIT_STD  # fresh rows, not zeros
    np.testing.assert_array_equal(new, tables.extend(table, L, "new_rows"))  # seeded
    for m in tables.TABLE_METHODS:  # inside the trained range nothing changes
        np.testing.assert_array_equal(tables.extend(table, n - 2, m), table[:n - 2])


def test_table_methods_rewrite_the_checkpoint_table():
    run = fake_run(rows=4 * TRAINED)  # rows past the trained length are not used
    run.config.model.max_length = 4 * TRAINED
    table = np.arange(4 * TRAINED * 3, dtype=np.float32).reshape(4 * TRAINED, 3)
    params = {"encoder": {"embeddings": {"position": {"tree": {"table": table}}, "x": 1}}}
    for m in tables.TABLE_METHODS:
        cell = methods.make_cell(run, methods.Variant(m), 5 * TRAINED)
        assert dict(cell.config.position) == {"name": "learned", "rows": 5 * TRAINED}
        assert cell.config.model.max_length == 5 * TRAINED
        new = np.asarray(cell.rewrite(params)["encoder"]["embeddings"]["position"]["tree"]["table"])
        np.testing.assert_array_equal(new, tables.extend(table[:TRAINED], 5 * TRAINED, m))
    inside = methods.make_cell(run, methods.Variant("tile"), TRAINED)
    assert inside.config.position.name == "learned" and inside.details["rows"] == TRAINED
    with pytest.raises(methods.NotApplicable, match="extends a learned table"):
        methods.make_cell(fake_run("rope"), methods.Variant("interpolate"), 64)
