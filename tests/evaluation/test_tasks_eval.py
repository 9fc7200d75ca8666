"""eval.py --tasks on the tiny trained checkpoint: task records with intervals, longdoc rows
inside one document, not_applicable cells with reasons, tables and plots, resumability, and
one-line exit-2 errors (eval.py and train.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from posjax.errors import ConfigError
from posjax.evaluation import driver
from tests.evaluation.fixtures import REPO, TRAINED


def request(out, workdir, **kw):
    fields = dict(out=str(out), workdirs=[workdir], lengths=[TRAINED, 2 * TRAINED],
                  methods=["hierarchical"], alphas=(0.4,), masked_tokens=120, batch_tokens=256,
                  progress=False, tasks=["passkey", "longdoc"], task_rows=2)
    fields.update(kw)
    return driver.Request(**fields)


@pytest.fixture(scope="module")
def task_sweep(trained_workdir, tmp_path_factory):
    out = tmp_path_factory.mktemp("tasks")
    return str(out), driver.run(request(out, trained_workdir))


def test_task_records(task_sweep):
    out, results = task_sweep
    cells = {(c["task"], c["length"]): c for c in results["tasks"].values()}
    assert set(cells) == {("passkey", TRAINED), ("passkey", 2 * TRAINED),
                          ("longdoc", TRAINED), ("longdoc", 2 * TRAINED)}
    short = cells["passkey", TRAINED]  # 16 tokens cannot hold the key and the cue
    assert short["status"] == "not_applicable" and "needs rows of >=" in short["reason"]
    c = cells["passkey", 2 * TRAINED]
    assert c["status"] == "ok" and c["method"] == "hierarchical"
    o = c["overall"]
    assert o["rows"] == 10 and o["count"] == 50  # 5 depths x 2 rows, 5 digits each
    for name in ("exact", "digit_accuracy", "loss"):
        assert o[f"{name}_lo"] - 1e-9 <= o[name] <= o[f"{name}_hi"] + 1e-9
    assert [d["depth"] for d in c["depths"]] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert all(d["rows"] == 2 for d in c["depths"])
    assert c["rows"]["count"] == [5] * 10 and len(c["rows"]["distance"]) == 10
    # the key at depth 0 is the farthest from the cue
    assert c["rows"]["distance"][0] > c["rows"]["distance"][-1] > 0
    for n in (TRAINED, 2 * TRAINED):
        d = cells["longdoc", n]
        assert d["status"] == "ok" and d["overall"]["rows"] > 0
        assert sum(b["count"] for b in d["buckets"]) == d["overall"]["count"] > 0
        assert all(b["accuracy_lo"] <= b["accuracy"] <= b["accuracy_hi"] for b in d["buckets"])
    assert [b["start"] for b in cells["longdoc", 2 * TRAINED]["buckets"]] == [0, TRAINED]
    with open(os.path.join(out, "results.json")) as f:
        saved = json.load(f)
    assert saved["settings"]["tasks"] == ["passkey", "longdoc"] and len(saved["tasks"]) == 4
    names = set(os.listdir(out))
    assert {"tasks.md", "tasks.csv", "task_passkey_vs_length.png",
            "task_longdoc_vs_length.png", "heatmap_passkey_tiny_learned_hierarchical_alpha=0.4.png"
            } <= names
    md = open(os.path.join(out, "tasks.md")).read()
    assert "## passkey" in md and "exact @ depth 0.5" in md and "## longdoc" in md


def test_rerun_skips_finished_cells(task_sweep, trained_workdir):
    out, results = task_sweep
    again = driver.run(request(out, trained_workdir))
    for key, c in results["tasks"].items():
        assert again["tasks"][key].get("overall") == c.get("overall")


@pytest.mark.parametrize("fields, field", [
    ({"tasks": ["passkey", "lookup"]}, "tasks"),
    ({"task_rows": 0}, "task_rows"),
    ({"task_digits": 0}, "task_digits"),
])
def test_bad_task_input(tmp_path, fields, field):
    with pytest.raises(ConfigError) as e:
        driver.check_request(request(tmp_path / "out", "unused", **fields))
    assert e.value.field == field


def test_entry_points_exit_2_with_one_line(tmp_path, trained_workdir):
    cfg = tmp_path / "mixed.py"
    cfg.write_text("from posjax import defaults\n\ndef get_config():\n"
                   "    c = defaults.get_config('tiny')\n"
                   "    c.data.tasks = {'passkey': 0.7, 'copy_span': 0.5}\n    return c\n")
    runs = [
        (["train.py", f"--config={cfg}", f"--workdir={tmp_path / 'wd'}"], "train.py",
         "data.tasks="),
        (["eval.py", f"--workdir={trained_workdir}", f"--out={tmp_path / 'out'}",
          "--tasks=passkey,lookup"], "eval.py", "tasks='lookup'"),
    ]
    for args, name, words in runs:
        r = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                           timeout=300, env=dict(os.environ, PYTHONPATH=REPO))
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
        assert lines[0].startswith(f"{name}: error: {words}"), lines[0]
    assert not (tmp_path / "wd").exists() and not (tmp_path / "out").exists()
