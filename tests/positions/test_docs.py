"""docs/schemes.md, the scheme reference the README links, agrees with the code: its hook
paragraph names every hook in HOOKS (and the count in words is right), as positions/base.py
does, and its table has one row per registered scheme, none missing and none extra."""

import os
import re

from posjax import positions
from posjax.positions import HOOKS, Scheme

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMES_DOC = os.path.join(REPO, "docs", "schemes.md")
WORDS = {12: "twelve", 13: "thirteen", 14: "fourteen", 15: "fifteen", 16: "sixteen",
         17: "seventeen", 18: "eighteen"}


def _doc() -> str:
    with open(SCHEMES_DOC, encoding="utf-8") as f:
        return f.read()


def _hook_paragraph() -> str:
    section = _doc().split("# Position schemes", 1)[1]
    return section.split("\n\n", 2)[1]


def table_names(text: str) -> list:
    """The scheme names of the table's first column: `name`, and `a`, `b` on one row (a
    variant such as `rope` + `on_values=True` names its scheme)."""
    names = []
    for line in text.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1].split("+")[0]
            names += re.findall(r"`(\w+)`", first)
    return names


def test_table_names_are_read_from_the_first_column():
    text = ("| `position.name` | scheme |\n|---|---|\n| `rope` | rotary, `base` |\n"
            "| `rope` + `on_values=True` | ... |\n| `rerope`, `leaky_rerope` | `window` |\n")
    assert table_names(text) == ["rope", "rope", "rerope", "leaky_rerope"]


def test_the_table_has_every_registered_scheme_and_no_other():
    names = table_names(_doc())
    assert set(names) == set(positions.names())


def test_doc_and_base_describe_every_hook():
    paragraph = _hook_paragraph()
    assert f"some of {WORDS[len(HOOKS)]} hooks" in paragraph
    assert set(re.findall(r"`(\w+)`", paragraph)) >= set(HOOKS)
    with open(os.path.join(REPO, "posjax", "positions", "base.py"), encoding="utf-8") as f:
        base_doc = f.read().split('"""')[1]
    assert f"({WORDS[len(HOOKS)]}:" in base_doc
    for hook in HOOKS:  # each hook's signature line in the contract
        assert re.search(rf"^  {hook}\(params", base_doc, re.M), hook


def test_hooks_table_matches_the_hook_attributes():
    declared = [n for n, v in vars(Scheme).items() if n in Scheme.__annotations__
                and "hooks." in str(Scheme.__annotations__[n])]
    assert sorted(declared) == sorted(HOOKS)
