"""Tables for what applies: a method that applies at no length has no row in results.md, and
every method with not-applicable cells gets one line with its lengths and reason; the summary
names its folder and lists not-applicable cells only with --all. Synthetic cells, no JAX."""

from __future__ import annotations

import json

import pytest

from posjax.evaluation.report import report
from posjax.evaluation import summary
from tests.evaluation.test_seeds import _results


def _with_not_applicable():
    results = _results()
    for key, c in list(results["cells"].items()):
        alibi_ntk = key.startswith("w/alibi") and "|ntk|" in key
        if alibi_ntk or (key.startswith("w/rope") and "|ntk|L=32|" in key):
            results["cells"][key] = {k: v for k, v in c.items() if k not in ("rows", "overall")}
            results["cells"][key].update(
                status="not_applicable",
                reason="alibi has no 'ntk' method" if alibi_ntk else "too long")
    return results


def _section(md: str, run: str) -> str:
    start = md.index(f"## {run} ")
    end = md.find("\n## ", start + 1)
    return md[start:end if end > 0 else None]


def test_results_md_has_one_line_per_method_that_does_not_apply():
    md = report.to_markdown(_with_not_applicable())
    alibi, rope = _section(md, "alibi"), _section(md, "rope")
    assert "| ntk |" not in alibi  # no row of n/a per length
    assert "- ntk (every length): alibi has no 'ntk' method" in alibi
    assert alibi.count("alibi has no 'ntk' method") == 1
    assert "| ntk |" in rope and "n/a" in rope  # applies at L=16: its row stays
    assert "- ntk (L=32): too long" in rope


def test_summary_names_its_folder_and_hides_not_applicable_cells(tmp_path, capsys):
    results = _with_not_applicable()
    report.atomic_write(str(tmp_path / "results.json"), json.dumps(results))
    summary.main(["summary", str(tmp_path)])
    text = capsys.readouterr().out
    assert text.splitlines()[0] == f"# {tmp_path}/results.json"
    assert "n/a" not in text and "too long" not in text
    assert "3 not-applicable cells of 2 (run, method) pairs hidden (--all lists them" in text
    summary.main(["summary", str(tmp_path), "--all"])
    shown = capsys.readouterr().out
    assert "alibi:\n  - ntk (every length): alibi has no 'ntk' method" in shown
    assert "rope:\n  - ntk (L=32): too long" in shown
    with pytest.raises(SystemExit):
        summary.main(["summary", "--all"])
