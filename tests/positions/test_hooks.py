"""Every registered scheme's hooks take the parameters of posjax/positions/hooks.py's
Protocols, in that order and with those names (attention passes some by keyword)."""

from __future__ import annotations

import inspect

import pytest

from posjax import positions
from posjax.positions import base, hooks


def mismatches(cls) -> list[str]:
    """'<hook>: got (...), the contract is (...)' for each hook of `cls` off the contract."""
    out = []
    for name, protocol in hooks.PROTOCOLS.items():
        method = getattr(cls, name, None)
        if method is None:
            continue
        want = list(inspect.signature(protocol.__call__).parameters)[1:]
        got = list(inspect.signature(method).parameters)[1:]
        if got != want:
            out.append(f"{name}: got ({', '.join(got)}), the contract is ({', '.join(want)})")
    return out


def test_every_hook_has_a_protocol():
    assert list(hooks.PROTOCOLS) == list(base.HOOKS)


@pytest.mark.parametrize("name", positions.names())
def test_every_scheme_keeps_the_contract(name):
    assert mismatches(positions.scheme_class(name)) == []


def test_a_hook_off_the_contract_is_named():
    class Swapped(base.Scheme):
        def bias(self, params, k_pos, q_pos):  # the positions swapped
            del params
            return q_pos - k_pos

    assert mismatches(Swapped) == [
        "bias: got (params, k_pos, q_pos), the contract is (params, q_pos, k_pos)"]
