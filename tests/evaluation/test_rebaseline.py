"""posjax.evaluation.report.rebaseline: another baseline's paired tables from a committed
results.json."""

import os
import shutil

from posjax.evaluation.report import rebaseline

MINILM = os.path.join(os.path.dirname(__file__), "..", "..", "results", "minilm")


def test_differences_flip_sign_with_the_baseline(tmp_path):
    shutil.copy(os.path.join(MINILM, "results.json"), tmp_path / "results.json")
    assert rebaseline.main([str(tmp_path), "tile"]) == 0
    assert rebaseline.main([str(tmp_path), "hierarchical"]) == 0
    vs_tile = (tmp_path / "results_vs_tile.md").read_text()
    vs_hier = (tmp_path / "results_vs_hierarchical.md").read_text()

    def row(md, method):
        table = md.split("accuracy minus")[1]
        line = next(l for l in table.splitlines() if l.startswith(f"| {method} |"))
        return float(line.split("|")[3].split()[0])  # the 1536 column's estimate

    assert row(vs_tile, "hierarchical(alpha=0.4)") == -row(vs_hier, "tile") != 0
    assert sorted(os.listdir(tmp_path)) == ["results.json", "results_vs_hierarchical.md",
                                            "results_vs_tile.md"]


def test_unknown_method_is_one_line_and_exit_2(tmp_path, capsys):
    shutil.copy(os.path.join(MINILM, "results.json"), tmp_path / "results.json")
    assert rebaseline.main([str(tmp_path), "bogus"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "method='bogus'" in err
    assert rebaseline.main([str(tmp_path / "nowhere"), "tile"]) == 2
