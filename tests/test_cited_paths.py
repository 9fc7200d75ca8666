"""Every repository path that the docs, comments and configs cite exists.

Scans the prose a reader follows (README.md, docs/, results/ and bench/ markdown, the
pyproject.toml comments, the configs, the entry points and the package's docstrings and
comments) for tokens that start with a top-level folder (posjax/, bench/, results/, ...) and
for `python -m MODULE` commands, and checks each against the checkout. Pure file reads: no
JAX, well under a second.

Allowed on purpose:
- placeholders, in angle brackets (`results/<experiment>/README.md`) or a segment in capitals
  (`bench/NAME.sh`, `python -m bench.NAME`): the part before the first one must exist;
- glob patterns (`results/*/derived.md`, `{a,b}`): at least one file must match;
- outputs and inputs a command creates or the reader supplies (`--out=...`, `--workdir=...`,
  `--source=...`, `--root=...`): not citations, so not checked.
"""

from __future__ import annotations

import glob
import io
import os
import re
import tokenize

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP = ("posjax", "bench", "results", "configs", "tests", "docs", "examples", "notebooks", ".ci")
SOURCES = ("README.md", "docs/**/*.md", "results/**/*.md", "bench/**/*.md", "bench/*.sh",
           "pyproject.toml", "configs/**/*.py", "posjax/**/*.py", "tests/**/*.py",
           "examples/*.py", "notebooks/*.ipynb", "train.py", "eval.py")
# A token that starts with a top-level folder, not inside a longer path or a URL.
PATH = re.compile(r"(?<![\w./\-])((?:%s)/(?:[\w.*<>\-/]|\{[^{}\s]*\})*)"
                  % "|".join(re.escape(t) for t in TOP))
MODULE = re.compile(r"python -m ((?:posjax|bench|tests|results)(?:\.\w+)+)")
SUPPLIED = re.compile(r"--(?:out|workdir|source|root)=$")
TRAILING = ".,;:)`'\""


def prose(path: str) -> str:
    """The text a reader sees: a Python file's comments and docstrings (string literals that
    stand alone as a statement), each at its own line, so that code naming files (test lists,
    f-strings, defaults) is not read as a citation; any other file whole."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not path.endswith(".py"):
        return text
    lines = [""] * (text.count("\n") + 2)
    previous = tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        docstring = tok.type == tokenize.STRING and previous in (
            tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
        if tok.type == tokenize.COMMENT or docstring:
            for i, line in enumerate(tok.string.split("\n")):
                lines[tok.start[0] - 1 + i] += " " + line
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            previous = tok.type
    return "\n".join(lines)


def _files() -> list[str]:
    found = set()
    for pattern in SOURCES:
        found.update(glob.glob(os.path.join(ROOT, pattern), recursive=True))
    return sorted(f for f in found if os.path.isfile(f))


def _expand_braces(token: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    return [x for alt in m.group(1).split(",")
            for x in _expand_braces(token[:m.start()] + alt + token[m.end():])]


CAPITALS = re.compile(r"(^|/)[A-Z][A-Z0-9_]*(\.\w+)?(/|$)")


def _exists(token: str) -> bool:
    placeholder = CAPITALS.search(token)
    cut = min(i for i in (token.find("<"), placeholder.start() if placeholder else -1, len(token))
              if i >= 0)
    if cut < len(token):  # a placeholder: the folder before it must exist
        return os.path.isdir(os.path.join(ROOT, token[:cut].rsplit("/", 1)[0]))
    return any(glob.glob(os.path.join(ROOT, t)) for t in _expand_braces(token))


def _resolve(token: str) -> str | None:
    """The token with trailing punctuation stripped as long as it does not resolve; None when
    no form of it exists."""
    while token:
        if _exists(token):
            return token
        if token[-1] not in TRAILING:
            return None
        token = token[:-1]
    return None


def cited_paths(text: str) -> list[tuple[int, str]]:
    """(line number, token) of every path token in `text` that is a citation."""
    out = []
    for m in PATH.finditer(text):
        if SUPPLIED.search(text[max(0, m.start() - 12):m.start()]):
            continue
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def _module_exists(name: str) -> bool:
    parts = name.split(".")
    if parts[-1].isupper():  # a placeholder (python -m bench.NAME): its package must exist
        return os.path.isdir(os.path.join(ROOT, *parts[:-1]))
    path = os.path.join(ROOT, *parts)
    return os.path.isfile(path + ".py") or os.path.isfile(os.path.join(path, "__init__.py"))


def test_the_scanner_finds_and_skips_what_it_should():
    text = ("see bench/README.md. And results/<experiment>/README.md or results/*/README.md\n"
            "python eval.py --out=results/new_run --config=configs/experiments/schemes.py\n"
            "https://example.org/posjax/nothing, bench/NAME.sh, nope/NAME.sh and posjax/no.py.")
    tokens = [t for _, t in cited_paths(text)]
    assert tokens == ["bench/README.md.", "results/<experiment>/README.md",
                      "results/*/README.md", "configs/experiments/schemes.py",
                      "bench/NAME.sh", "posjax/no.py."]
    assert [_resolve(t) for t in tokens] == ["bench/README.md", "results/<experiment>/README.md",
                                             "results/*/README.md",
                                             "configs/experiments/schemes.py", "bench/NAME.sh",
                                             None]
    assert not _exists("results/no_such_folder/<experiment>/README.md")
    assert _expand_braces("bench/{a,b}.md") == ["bench/a.md", "bench/b.md"]
    assert [t for _, t in cited_paths("bench/{README,nope}.md")] == ["bench/{README,nope}.md"]
    assert _exists("bench/{README,nope}.md") and not _exists("bench/{nope,nada}.md")
    assert _module_exists("bench.NAME") and _module_exists("posjax.evaluation.report.rebaseline")
    assert not _module_exists("bench.no_such_script")


@pytest.mark.parametrize("path", _files(), ids=lambda p: os.path.relpath(p, ROOT))
def test_every_cited_path_exists(path):
    text = prose(path)
    missing = [f"line {line}: {token}" for line, token in cited_paths(text)
               if _resolve(token) is None]
    missing += [f"python -m {name}" for name in MODULE.findall(text) if not _module_exists(name)]
    assert not missing, f"{os.path.relpath(path, ROOT)} cites paths that do not exist: {missing}"
