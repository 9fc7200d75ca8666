"""Attention gives every existing scheme the numbers it gave before the `carried_scores` hook
(PaTH) was added: one scheme per attention hook, reference and chunked, values and gradients
(records: attend_golden.py)."""

import json

import numpy as np
import pytest

from tests.attention import attend_golden as golden


@pytest.mark.slow
@pytest.mark.parametrize("key,name,causal", golden.cases(), ids=[c[0] for c in golden.cases()])
def test_every_hook_gives_the_recorded_numbers(key, name, causal):
    with open(golden.GOLDEN) as f:
        want = json.load(f)[key]
    got = golden.record(name, causal)
    assert sorted(got) == sorted(want)
    for path in want:
        pairs = [("out", got[path]["out"], want[path]["out"])]
        pairs += [(f"grad {i}", g, w) for i, (g, w) in enumerate(zip(got[path]["grads"],
                                                                    want[path]["grads"]))]
        assert len(got[path]["grads"]) == len(want[path]["grads"]), path
        for what, g, w in pairs:
            # atol: gradients that are 0 in exact arithmetic (a per-head constant added to
            # all logits, DAPE's output bias) come out as rounding noise of ~1e-6
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"{key} {path} {what}")
