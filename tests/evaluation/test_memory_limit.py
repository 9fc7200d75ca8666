"""eval.py refuses a length whose batch would not fit free memory, before anything is built."""

import pytest

from posjax.errors import ConfigError
from posjax.evaluation import driver
from posjax.evaluation.run import restore

# Slow tier: trains the tiny evaluation model (session fixture) and sweeps it.
pytestmark = pytest.mark.slow

GIB = 1 << 30


def test_a_length_that_does_not_fit_names_the_limit(trained_workdir):
    run = restore.open_run(trained_workdir)
    driver.check_memory([run], [64, 4096], 16384, available=64 * GIB)  # fits
    with pytest.raises(ConfigError) as e:
        driver.check_memory([run], [64, 100_000_000], 16384, available=64 * GIB)
    assert e.value.field == "lengths" and e.value.value == 100_000_000
    assert "on this machine" in str(e.value) and "GiB" in str(e.value)
