"""Every experiment config (configs/experiments/*.py, the eval.py --config files) loads in its
default and ':tiny' variants, every run it names passes validate_model_config, and its sweep
names only known methods; comparisons that claim one body differ only where they say."""

from __future__ import annotations

import importlib
import pathlib

import pytest

from posjax import models
from posjax.evaluation import methods

ROOT = pathlib.Path(__file__).resolve().parents[2]
FILES = sorted(p.stem for p in (ROOT / "configs" / "experiments").glob("*.py")
               if p.stem not in ("__init__", "common"))
LAYOUT = ("local_window", "global_every", "global_first", "nope_every", "local_position")


def _load(stem, variant):
    return importlib.import_module(f"configs.experiments.{stem}").get_config(variant)


@pytest.mark.parametrize("stem,variant", [(s, v) for s in FILES for v in (None, "tiny")])
def test_experiment_config_loads_and_validates(stem, variant):
    exp = _load(stem, variant)
    assert exp.name and exp.workdir_root.startswith("workdirs/")
    assert exp.runs and all(int(n) >= 1 for n in exp.eval.lengths)
    if exp.eval.methods is not None:
        methods.check_methods(list(exp.eval.methods))
    for name, config in exp.runs.items():
        config.model.vocab_size = config.model.get("vocab_size", None) or 1000
        spec = models.validate_model_config(config, require_vocab=True)
        assert config.data.seq_len <= spec.max_length and config.train.steps > 0, name


def test_modern_runs_share_one_body_and_budget():
    """The modern-layout comparison: same body, data and budget; only positions and layout
    differ, and only 'modern' has local layers (with the local RoPE base)."""
    runs = _load("modern", None).runs

    def body(config):
        d = config.to_dict()
        d.pop("position")
        d.pop("seed")
        for field in LAYOUT:
            d["model"].pop(field, None)
        return d

    runs = {name: c for name, c in runs.items() if c.seed == 0}
    runs = type(_load("modern", None).runs)(runs)
    bodies = [body(c) for c in runs.values()]
    assert all(b == bodies[0] for b in bodies)
    assert runs.modern.model.local_window < runs.modern.data.seq_len
    assert dict(runs.modern.model.local_position) == {"base": 10000.0}
    assert runs.modern.position.base == 160000.0 and runs.rope.position.base == 10000.0
    assert runs.rope.model.local_window is None and runs.alibi.model.local_window is None


@pytest.mark.parametrize("stem", [s for s in FILES if s != "logn_seeds"])
def test_every_run_is_trained_with_three_seeds(stem):
    """Seed 0 keeps the run's name (its workdir); seeds 1 and 2 differ only in config.seed."""
    exp = _load(stem, None)
    assert list(exp.seeds) == [0, 1, 2]
    for name, config in exp.runs.items():
        if config.seed == 0:
            for s in (1, 2):
                other = exp.runs[f"{name}_seed{s}"].to_dict()
                assert other.pop("seed") == s
                mine = config.to_dict()
                mine.pop("seed")
                assert other == mine
    assert list(_load(stem, "tiny").seeds) == [0]


@pytest.mark.parametrize("variant", ["long", "long_tiny"])
def test_synthetic_long_continues_every_method_over_three_seeds_at_a_constant_rate(variant):
    from posjax.evaluation.run import continued, recovery

    exp = _load("synthetic", variant)
    assert recovery.check_seeds(list(exp.continue_seeds)) == [0, 1, 2]
    continued.check_options(schedule=exp.continue_schedule, batch_size=exp.continue_batch_size)
    assert exp.continue_schedule == "constant"
    assert set(methods.check_methods(list(exp.recovery_methods), field="recovery_methods")) == {
        "hierarchical", "tile", "interpolate", "stretch", "new_rows"}
    assert 0 in recovery.check_steps(list(exp.recovery_steps))
    assert exp.continue_length > exp.runs.learned.data.seq_len


def test_schemes_logn_variant_reuses_the_comparisons_rope_runs():
    """':logn' scores the comparison's own RoPE workdirs (same root, same configs, so eval.py
    trains nothing new) with log-n on, to 128x the training length."""
    full, logn = _load("schemes", None), _load("schemes", "logn")
    assert logn.workdir_root == full.workdir_root and logn.eval.logn and not full.eval.logn
    assert sorted(logn.runs) == ["rope", "rope_seed1", "rope_seed2"]
    assert all(logn.runs[n].to_dict() == full.runs[n].to_dict() for n in logn.runs)
    assert max(logn.eval.lengths) == max(full.eval.lengths) == 128 * full.runs.rope.data.seq_len
