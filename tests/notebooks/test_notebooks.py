"""The notebooks run top to bottom (nbclient, a real ipykernel) on CPU with the SMALL setting
(POSJAX_NOTEBOOK_SMALL=1: tiny models, a few steps, two lengths), in a temporary folder. A
notebook that stops running fails here. They are stored without outputs.

extrapolation.ipynb runs its install cell in its Colab form (POSJAX_NOTEBOOK_COLAB=1): it
clones this checkout (a local path as REPO_URL) and runs notebooks/colab_install.py there,
whose pip commands get --dry-run --no-index (resolved in full against the pins, offline,
nothing installed). kernels.ipynb runs it in its local form."""

import importlib.metadata
import os

import nbformat
import pytest

from tests.reliability import runner

# Slow tier: notebooks run top to bottom in a kernel.
pytestmark = pytest.mark.slow

NOTEBOOKS = os.path.join(runner.REPO, "notebooks")


def _installed(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run(name, tmp_path, monkeypatch, timeout=300, env=None):
    from nbclient import NotebookClient

    for key, value in runner.make_env().items():  # CPU, this checkout, the compile cache
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("POSJAX_NOTEBOOK_SMALL", "1")
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    return "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []) if o.get("output_type") == "stream")


@pytest.mark.parametrize("name", ["extrapolation.ipynb", "kernels.ipynb"])
def test_stored_without_outputs(name):
    nb = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:80]


def test_extrapolation_notebook_runs(tmp_path, monkeypatch):
    text = _run("extrapolation.ipynb", tmp_path, monkeypatch, env={
        "POSJAX_NOTEBOOK_COLAB": "1", "POSJAX_REPO_URL": runner.REPO,
        "POSJAX_PIP_ARGS": "--dry-run --no-index --no-build-isolation"})
    clone = tmp_path / "posjax"
    assert f"posjax from {clone}" in text
    # every pin (jax included; or, where libtpu is installed as CI installs it for the TPU
    # compile tests, every pin but the runtime's jax), then posjax without deps
    if _installed("libtpu"):
        assert "keeping the runtime's jax" in text and "tpu)" in text
    else:
        assert "installing every pin of requirements.txt" in text
    assert "$ -m pip install -q -r " in text and "$ -m pip install -q --no-deps -e ." in text
    assert "setting: SMALL" in text
    for scheme in ("rope", "alibi", "learned"):
        assert f"{scheme}: trained to step 3" in text
    assert "cells evaluated" in text and "accuracy_vs_length.png" in text
    assert "max |original - extended| on 128 tokens: 0.0" in text
    assert os.path.exists(clone / "notebook_runs" / "small" / "eval" / "results.json")


def test_kernels_notebook_says_it_needs_a_gpu_on_cpu(tmp_path, monkeypatch):
    text = _run("kernels.ipynb", tmp_path, monkeypatch)
    assert "needs a GPU" in text
