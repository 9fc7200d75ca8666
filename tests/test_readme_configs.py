"""README.md names every config file of configs/ (the Training section lists them by corpus;
the Layout section points there), so a new config cannot go unmentioned."""

import os
import re

from posjax.__main__ import config_lines

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config_names() -> list:
    """The configs/*.py files `python -m posjax list configs` lists (not experiments/)."""
    return [line.split()[0].removeprefix("configs/") for line in config_lines(REPO)
            if line.startswith("configs/") and not line.startswith("configs/experiments/")]


def unnamed(readme: str, names: list) -> list:
    """The names `readme` mentions neither as `name.py...` (in backticks) nor as configs/<name>.py."""
    return [n for n in names
            if not re.search(rf"`{re.escape(n)}[`:]|configs/{re.escape(n)}\b", readme)]


def test_a_config_the_readme_does_not_name_is_found():
    assert unnamed("`bert.py`, `tiny.py:<scheme>`, configs/workdir.py:OUT",
                   ["bert.py", "tiny.py", "workdir.py", "pope.py"]) == ["pope.py"]


def test_the_readme_names_every_config():
    names = config_names()
    assert {"base.py", "nezha.py", "rope2d.py", "workdir.py"} <= set(names)
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        assert unnamed(f.read(), names) == []
