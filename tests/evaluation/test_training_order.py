"""An experiment trains seed 0 of every run before any run's seed 1 (driver.training_order)."""

from configs.experiments import algorithmic
from posjax.evaluation import driver


def test_seed_zero_of_every_run_comes_first():
    runs = algorithmic.get_config("core").runs
    order = driver.training_order(runs)
    assert sorted(order) == sorted(runs)
    seeds = [int(runs[name].seed) for name in order]
    assert seeds == sorted(seeds) and seeds[0] == 0 and seeds[-1] == 2
    first = order[:seeds.count(0)]
    assert all("_seed" not in name for name in first)
    # within a seed, a run's plain and randomized variants are neighbours (a paired difference
    # is ready as soon as both finish)
    assert first.index("reverse_string_rope_randomized") == first.index("reverse_string_rope") + 1

