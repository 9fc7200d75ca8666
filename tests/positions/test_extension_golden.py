"""Length extension gives exactly the configs, details, params rewrites and refusals it gave
before the rules moved onto the scheme classes (records: extension_cases.py)."""

import json

import pytest

from tests.positions import extension_cases as cases


@pytest.mark.slow
def test_every_scheme_and_method_extends_as_recorded():
    with open(cases.GOLDEN) as f:
        golden = json.load(f)
    got = cases.compute()
    for entry in ("eval", "pretrained"):
        assert sorted(got[entry]) == sorted(golden[entry]), f"{entry}: the cases changed"
        differ = [k for k in golden[entry] if got[entry][k] != golden[entry][k]]
        assert not differ, (f"{entry}: {len(differ)} records differ, e.g. "
                            + "; ".join(f"{k}: {golden[entry][k]} -> {got[entry][k]}"
                                        for k in differ[:5]))
