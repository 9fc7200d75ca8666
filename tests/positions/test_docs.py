"""The hook list that README's "Position schemes" and positions/base.py describe is the one in
HOOKS: every hook is named, and the count in words is right."""

import os
import re

from posjax.positions import HOOKS, Scheme

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORDS = {12: "twelve", 13: "thirteen", 14: "fourteen"}


def _readme_paragraph() -> str:
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Position schemes", 1)[1]
    return section.split("\n\n", 2)[1]


def test_readme_and_base_describe_every_hook():
    paragraph = _readme_paragraph()
    assert f"some of {WORDS[len(HOOKS)]} hooks" in paragraph
    assert set(re.findall(r"`(\w+)`", paragraph)) >= set(HOOKS)
    with open(os.path.join(REPO, "posjax", "positions", "base.py"), encoding="utf-8") as f:
        base_doc = f.read().split('"""')[1]
    assert f"({WORDS[len(HOOKS)]}:" in base_doc
    for hook in HOOKS:  # each hook's signature line in the contract
        assert re.search(rf"^  {hook}\(params", base_doc, re.M), hook


def test_hooks_table_matches_the_hook_attributes():
    declared = [n for n, v in vars(Scheme).items() if n in Scheme.__annotations__
                and "Callable" in str(Scheme.__annotations__[n])]
    assert sorted(declared) == sorted(HOOKS)
