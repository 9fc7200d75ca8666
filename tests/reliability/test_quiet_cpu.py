"""A CPU run prints nothing alarming even with libtpu installed (requirements-tpu.txt).

libtpu, when importable, makes jax try to start a TPU backend on every machine; on one
without TPU chips that fails quietly for jax but prints libtpu's start-up errors
("INVALID_ARGUMENT: unexpected worker hostname", "could not determine TPU accelerator type").
posjax.config.cli.quiet_platforms (called by train.py, eval.py and python -m posjax.convert) sets
JAX_PLATFORMS=cpu in exactly that situation and leaves every other one alone.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from posjax.config import cli
from tests.reliability import runner

# Slow tier: whole train.py / eval.py runs in subprocesses.
pytestmark = pytest.mark.slow


def _probes(monkeypatch, *, libtpu=True, chip=False, plugin=False):
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if (name == "libtpu" and libtpu) else None)
    monkeypatch.setattr(cli, "_has_tpu_chip", lambda: chip)
    monkeypatch.setattr(cli, "_has_accelerator_plugin", lambda: plugin)


@pytest.mark.parametrize("env,probes,expected", [
    ({}, {}, "cpu"),  # libtpu, no chip, no GPU plugin: CPU is all jax could use
    ({"JAX_PLATFORMS": "tpu"}, {}, None),  # the user's choice wins
    ({"JAX_FORCE_TPU_INIT": "1"}, {}, None),
    ({}, {"chip": True}, None),  # a TPU VM: jax must find its TPU
    ({}, {"plugin": True}, None),  # a CUDA / ROCm plugin: jax picks the GPU
    ({}, {"libtpu": False}, None),  # nothing to silence
])
def test_quiet_platforms_decides(monkeypatch, env, probes, expected):
    _probes(monkeypatch, **probes)
    environ = dict(env)
    assert cli.quiet_platforms(environ) == expected
    assert environ.get("JAX_PLATFORMS") == (expected or env.get("JAX_PLATFORMS"))


def test_probes_on_this_machine_do_not_crash():
    assert isinstance(cli._has_tpu_chip(), bool)
    assert isinstance(cli._has_accelerator_plugin(), bool)


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                    reason="libtpu not installed (requirements-tpu.txt): nothing to silence")
def test_cpu_start_is_quiet_with_libtpu_installed():
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
    env["PYTHONPATH"] = runner.REPO
    code = ("from posjax.config.cli import quiet_platforms; quiet_platforms(); import jax; "
            "print(jax.default_backend(), len(jax.devices()))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120, cwd=runner.REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "cpu"
    for alarming in ("TPU", "INVALID_ARGUMENT", "E0000", "WARNING"):
        assert alarming not in r.stderr, r.stderr
