"""What a newcomer types first: --help exits 0 and says where configs and schemes are listed;
posjax.evaluation.legacy_intervals without a folder prints its usage (exit 2) instead of nothing."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args):
    env = dict(os.environ, JAX_PLATFORMS="cpu", POSJAX_HUGE_PAGES="0")
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("script", ["train.py", "eval.py"])
@pytest.mark.parametrize("flag", ["--help", "--helpfull"])
def test_help_exits_0_and_points_to_the_list(script, flag):
    r = _run(script, flag)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "python -m posjax list" in r.stdout and f"{script}:" in r.stdout, r.stdout[-2000:]


def test_an_unknown_flag_is_still_an_error():
    r = _run("train.py", "--hlep")
    assert r.returncode != 0 and "hlep" in r.stderr


def test_legacy_intervals_without_a_folder_prints_usage_exit_2():
    r = _run("-m", "posjax.evaluation.legacy_intervals")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("usage: python -m posjax.evaluation.legacy_intervals FOLDER"), r.stderr


def test_legacy_intervals_names_a_folder_without_results(tmp_path):
    r = _run("-m", "posjax.evaluation.legacy_intervals", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.strip() == (f"legacy_intervals: error: folder={tmp_path} is not allowed: "
                                "a folder holding a results.json")
    assert not (tmp_path / "intervals.md").exists()
