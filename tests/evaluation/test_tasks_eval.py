"""eval.py --tasks on the tiny trained checkpoint: task records with intervals, longdoc rows
inside one document, not_applicable cells with reasons, tables and plots, resumability, and
one-line errors (exit 2 from train.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from posjax.errors import ConfigError
from posjax.evaluation import driver
from tests.evaluation.fixtures import REPO, TRAINED

# Slow tier: trains the tiny evaluation model (session fixture) and sweeps it.
pytestmark = pytest.mark.slow


def request(out, workdir, **kw):
    fields = dict(out=str(out), workdirs=[workdir], lengths=[2 * TRAINED],
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
    assert set(cells) == {("passkey", 2 * TRAINED), ("longdoc", 2 * TRAINED)}
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
    d = cells["longdoc", 2 * TRAINED]
    assert d["status"] == "ok" and d["overall"]["rows"] > 0
    assert sum(b["count"] for b in d["buckets"]) == d["overall"]["count"] > 0
    assert all(b["accuracy_lo"] <= b["accuracy"] <= b["accuracy_hi"] for b in d["buckets"])
    assert [b["start"] for b in d["buckets"]] == [0, TRAINED]
    assert len(d["rows"]["count"]) == d["overall"]["rows"]
    with open(os.path.join(out, "results.json")) as f:
        saved = json.load(f)
    assert saved["settings"]["tasks"] == ["passkey", "longdoc"] and len(saved["tasks"]) == 2
    names = set(os.listdir(out))
    assert {"tasks.md", "tasks.csv", "task_passkey_vs_length.png",
            "task_longdoc_vs_length.png", "heatmap_passkey_tiny_learned_hierarchical_alpha=0.4.png"
            } <= names
    md = open(os.path.join(out, "tasks.md")).read()
    assert "## passkey" in md and "exact @ depth 0.5" in md and "## longdoc" in md


def test_too_short_and_causal_are_not_applicable(trained_workdir):
    from posjax.evaluation.run import batches, restore
    from posjax.evaluation import methods
    from posjax.evaluation.run.tasks import sweep

    run = restore.open_run(trained_workdir)
    t = sweep.check(sweep.TaskSettings(("passkey",)))
    c = sweep.evaluate_task_cell(run, methods.Variant("hierarchical", alpha=0.4), TRAINED,
                                 "passkey", t, batches.Settings(), methods.Options())
    assert c["status"] == "not_applicable" and "needs rows of >=" in c["reason"]
    run.config.model.causal = True
    c = sweep.evaluate_task_cell(run, methods.Variant("as_is"), TRAINED, "longdoc", t,
                                 batches.Settings(), methods.Options())
    assert c["status"] == "not_applicable" and "encoders only" in c["reason"]


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


def test_train_py_exits_2_with_one_line(tmp_path):
    """Fractions above 1 (eval.py's --tasks errors take the same ConfigError path, above)."""
    cfg = tmp_path / "mixed.py"
    cfg.write_text("from posjax.config import defaults\n\ndef get_config():\n"
                   "    c = defaults.get_config('tiny')\n"
                   "    c.data.tasks = {'passkey': 0.7, 'copy_span': 0.5}\n    return c\n")
    r = subprocess.run([sys.executable, "train.py", f"--config={cfg}",
                        f"--workdir={tmp_path / 'wd'}"], cwd=REPO, capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, PYTHONPATH=REPO))
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith("train.py: error: data.tasks="), lines[0]
    assert "sum to 1.2" in lines[0] and not (tmp_path / "wd").exists()
