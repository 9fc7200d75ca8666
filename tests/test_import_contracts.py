"""The import contracts in pyproject.toml stay honest: an ignore that no longer matches an
import (a stale exception to the arrows) fails `lint-imports` instead of being silently kept."""

import os
import subprocess
import sys
import tomllib

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYPROJECT = os.path.join(REPO, "pyproject.toml")
LINT_IMPORTS = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def importlinter_text() -> str:
    with open(PYPROJECT, encoding="utf-8") as f:
        text = f.read()
    return text[text.index("[tool.importlinter]"):]


def test_no_contract_silences_stale_ignores():
    with open(PYPROJECT, "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    assert contracts
    silenced = [c["name"] for c in contracts
                if c.get("unmatched_ignore_imports_alerting", "error") != "error"]
    assert silenced == []


@pytest.mark.slow  # two whole-package import graphs, uncached (lint-imports: requirements-lint.txt)
def test_a_stale_ignore_fails_lint_imports(tmp_path):
    text = importlinter_text()
    layers = 'type = "layers"\n'
    assert layers in text
    # positions never imports the kernels: an ignore of that import matches nothing
    stale = text.replace(layers, layers + 'ignore_imports = ["posjax.positions -> posjax.kernels"]\n',
                         1)
    config = tmp_path / "importlinter.toml"
    config.write_text(stale, encoding="utf-8")
    r = subprocess.run([LINT_IMPORTS, "--config", str(config), "--no-cache"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stdout[-2000:]
    assert "posjax.positions -> posjax.kernels" in r.stdout + r.stderr, r.stdout[-2000:]
    # the same contracts without the stale ignore pass
    config.write_text(text, encoding="utf-8")
    r = subprocess.run([LINT_IMPORTS, "--config", str(config), "--no-cache"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:]
