"""Session fixtures: the tiny trained workdir and one in-process sweep over it."""

from __future__ import annotations

import os

import pytest

from tests.evaluation.fixtures import TRAINED, train_once

LENGTHS = [TRAINED // 2, TRAINED, 2 * TRAINED]  # below, at and beyond the trained length
METHODS = ["as_is", "hierarchical"]


@pytest.fixture(scope="session")
def trained_workdir(tmp_path_factory):
    return train_once(str(tmp_path_factory.getbasetemp()))


def sweep_request(out, workdir):
    from posjax.evaluation import driver

    return driver.Request(out=str(out), workdirs=[workdir], lengths=list(LENGTHS),
                          methods=list(METHODS), alphas=(0.4,), num_docs=2, batch_tokens=32,
                          progress=False)


@pytest.fixture(scope="session")
def sweep(trained_workdir, tmp_path_factory):
    """(out dir, results) of 3 lengths x 2 methods on the tiny model."""
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


__all__ = ["cell", "sweep_request", "os"]
