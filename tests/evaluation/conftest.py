"""Session fixtures: the tiny trained workdir and one in-process sweep over it."""

from __future__ import annotations

import os

import pytest

from tests.evaluation.fixtures import TRAINED, train_once

LENGTHS = [TRAINED // 2, TRAINED, 2 * TRAINED]  # below, at and beyond the trained length
METHODS = ["as_is", "hierarchical"]
MASKED = 120  # masked tokens of the held-out stream: every length scores these


@pytest.fixture(scope="session")
def trained_workdir(tmp_path_factory):
    return train_once(str(tmp_path_factory.getbasetemp()))


def sweep_request(out, workdir):
    from posjax.evaluation import driver

    return driver.Request(out=str(out), workdirs=[workdir], lengths=list(LENGTHS),
                          methods=list(METHODS), alphas=(0.4,), masked_tokens=MASKED,
                          batch_tokens=256, baseline="as_is", progress=False)


@pytest.fixture(scope="session")
def sweep(trained_workdir, tmp_path_factory):
    """(out dir, results) of 3 lengths x 2 methods (+ the shuffled-positions cell) on the
    tiny model."""
    from posjax.evaluation import driver

    out = tmp_path_factory.mktemp("sweep")
    results = driver.run(sweep_request(out, trained_workdir))
    return str(out), results


@pytest.fixture
def cells(sweep):
    return list(sweep[1]["cells"].values())


def cell(cells, method, length):
    (found,) = [c for c in cells if c["method"] == method and c["length"] == length]
    return found


def nope_workdir_once(base: str) -> str:
    """A tiny NoPE model (position 'none'), trained 2 steps once per session."""
    from tests.evaluation.fixtures import train_once

    return train_once(base, "none")


@pytest.fixture(scope="session")
def nope_workdir(tmp_path_factory):
    return nope_workdir_once(str(tmp_path_factory.getbasetemp()))


__all__ = ["cell", "sweep_request", "os"]
