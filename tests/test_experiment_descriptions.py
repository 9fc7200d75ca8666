"""Experiment descriptions say what they mean: the docstrings of configs/experiments and
experiments and the results READMEs name no issue numbers or enumerations of
an issue ("issue 14, 2c", "Reproduction (a)"), which a reader of the repository cannot look up."""

import ast
import glob
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ISSUE_LABEL = re.compile(r"\b[Ii]ssue \d+|\b[Rr]eproduction \((?:\d+|[a-z]|issue[^)]*)\)")


def descriptions() -> dict:
    out = {}
    for path in glob.glob(os.path.join(REPO, "configs", "experiments", "*.py")) + glob.glob(
            os.path.join(REPO, "experiments", "*.py")):
        with open(path, encoding="utf-8") as f:
            out[path] = ast.get_docstring(ast.parse(f.read())) or ""
    for path in glob.glob(os.path.join(REPO, "results", "*", "README.md")):
        with open(path, encoding="utf-8") as f:
            out[path] = f.read()
    return out


def test_the_pattern_finds_issue_labels():
    found = [ISSUE_LABEL.search(t) for t in ("with seeds (issue 14, 2c)", "Issue 18's layout",
                                             "Reproduction (a), controlled", "Reproduction "
                                             "(issue 20): which", "reproduction (3) in")]
    assert all(found)
    assert not ISSUE_LABEL.search("Su's log-n scaling, reproduced (kexue.fm/archives/8823)")


def test_no_experiment_description_names_an_issue():
    texts = descriptions()
    assert len(texts) > 10
    labelled = {os.path.relpath(p, REPO): ISSUE_LABEL.findall(t) for p, t in texts.items()}
    assert {p: found for p, found in labelled.items() if found} == {}
