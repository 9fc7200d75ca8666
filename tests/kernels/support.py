"""Helpers shared by the kernel lowering tests."""

from __future__ import annotations


def pallas_calls(jaxpr):
    """Every pallas_call equation in a jaxpr, nested ones included."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from pallas_calls(inner)
