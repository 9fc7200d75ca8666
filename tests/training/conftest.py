"""Shared fixtures for tests/training: the tiny config and a real (tiny) model param tree."""

import importlib.util
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_config(name: str = "base.py", variant: str = "tiny"):
    spec = importlib.util.spec_from_file_location(f"cfg_{name[:-3]}", os.path.join(REPO, "configs", name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(variant)


@pytest.fixture
def tiny_config():
    config = load_config()
    config.model.vocab_size = 120
    return config
