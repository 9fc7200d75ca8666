"""results/ holds short answers, not a diary: each experiment's README.md (question, command,
answer) is at most 40 lines and results/FINDINGS.md, the index, at most 150."""

from __future__ import annotations

import pathlib

import pytest

RESULTS = pathlib.Path(__file__).resolve().parents[1] / "results"
READMES = sorted(RESULTS.glob("*/README.md"))


def test_there_are_experiment_readmes():
    assert len(READMES) >= 10


@pytest.mark.parametrize("readme", READMES, ids=lambda p: p.parent.name)
def test_an_experiment_readme_is_at_most_40_lines(readme):
    assert len(readme.read_text().splitlines()) <= 40


def test_the_findings_index_is_at_most_150_lines():
    assert len((RESULTS / "FINDINGS.md").read_text().splitlines()) <= 150
