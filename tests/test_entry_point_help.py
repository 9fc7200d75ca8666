"""What a newcomer types first: --help exits 0, says where configs and schemes are listed and
sends the reader only to README headings that exist."""

import glob
import os
import re
import subprocess
import sys

import pytest

from posjax.__main__ import main as posjax_main
from posjax.convert.__main__ import main as convert_main
from posjax.evaluation.run import options

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# "README 'Scaling out'", "bench/README.md's \"Training throughput\"", "README section 'X'"
README_REFERENCE = re.compile(r"((?:[\w.-]+/)*README)(?:\.md)?(?:'s)?,? (?:section )?"
                              r"['\"‘“]([^'\"’”\n]+)['\"’”]")


def headings(readme: str) -> set:
    with open(os.path.join(REPO, readme), encoding="utf-8") as f:
        return {line.lstrip("#").strip() for line in f if re.match(r"#+ ", line)}


def unknown_readme_references(text: str) -> list:
    """The README headings `text` refers to that the README (at the repository root, or the
    path written before README) does not have."""
    out = []
    for readme, heading in README_REFERENCE.findall(text):
        if heading not in headings(readme + ".md"):
            out.append(f"{readme} '{heading}'")
    return out


def test_a_reference_to_a_missing_heading_is_found():
    assert unknown_readme_references("see README 'Scaling'): TPU") == ["README 'Scaling'"]
    assert unknown_readme_references("see README 'Scaling out'): TPU") == []
    assert unknown_readme_references("bench/README.md's \"Training speed\"") == [
        "bench/README 'Training speed'"]


def test_every_readme_heading_the_code_names_exists():
    """Help texts are the entry points' docstrings and flag help strings: every README heading
    any Python file of the repository names (help text or not) is a heading of that README."""
    files = [f for pattern in ("*.py", "posjax/**/*.py", "configs/**/*.py", "examples/**/*.py",
                               "bench/**/*.py") for f in glob.glob(os.path.join(REPO, pattern),
                                                                   recursive=True)]
    assert len(files) > 50
    missing = {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            found = unknown_readme_references(f.read())
        if found:
            missing[os.path.relpath(path, REPO)] = found
    assert missing == {}


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
    assert unknown_readme_references(r.stdout) == []
    if script == "eval.py" and flag == "--helpfull":  # one flag per option, with its doc
        text = " ".join(r.stdout.split())
        for o in options.OPTIONS:
            if o.flag_name is not None:
                assert f"--{o.flag_name}:" in text or f"--[no]{o.flag_name}:" in text, o.name
                assert " ".join(o.doc.split())[:40] in text, o.name


@pytest.mark.parametrize("main, says", [
    (posjax_main, "Nothing here builds a model or imports flax."),
    # the whole description, the command after its "eval.py reads:" included
    (convert_main, "eval.py reads:\n\n    python train.py --config=configs/workdir.py:OUT")])
def test_module_help_exits_0_with_its_whole_text(capsys, main, says):
    """python -m posjax --help, python -m posjax.convert --help (their main, in process)."""
    try:
        code = main(["--help"])
    except SystemExit as e:  # argparse's --help
        code = e.code
    out, err = capsys.readouterr()
    assert code == 0 and err == "", err
    assert says in out and unknown_readme_references(out) == []


def test_an_unknown_flag_is_still_an_error():
    r = _run("train.py", "--hlep")
    assert r.returncode != 0 and "hlep" in r.stderr

