"""What `Scheme.extend(method, length, ...)` takes and returns: running a trained model at a
length it was not trained at.

A scheme lists the methods it offers in its `extend_methods` class attribute (name -> one line)
and builds each in `extend`; every scheme offers AS_IS (the model unchanged). The result is an
`Extension`: the position fields of the longer model, a rewrite of the scheme's embed params
(when the method changes a table), the resolved settings, and whether only the global layers
change. posjax.models.extension applies it to a config and a checkpoint's params; eval.py's
methods (posjax.evaluation.methods) and Pretrained.extend both go through it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

AS_IS = "as_is"
AS_IS_DOC = "the model unchanged (positions past the trained ones as they come)"
ALIASES = {"none": AS_IS}  # what Pretrained.extend and eval.py also accept


class NotApplicable(Exception):
    """This method cannot run this model at this length; the message says why.

    `allowed`, when set, says which lengths the method does reach, in the words of a
    ConfigError on the length (Pretrained.extend reports it that way)."""

    def __init__(self, reason: str, allowed: Optional[str] = None):
        super().__init__(reason)
        self.allowed = allowed


@dataclasses.dataclass(frozen=True)
class ExtendSettings:
    """Optional settings of the methods; None = the method's default at this length."""

    alpha: Optional[float] = None  # hierarchical: a in (0, 1), not 0.5 (default 0.4)
    factor: Optional[float] = None  # RoPE scalings: s (default max(1, L/T); dynamic NTK 1)
    window: Optional[int] = None  # ReRoPE: w (default T // 2)
    leaky_factor: Optional[float] = None  # leaky ReRoPE: k (default max(2, (L-w)/(T-w)))


@dataclasses.dataclass(frozen=True)
class Extension:
    """One method at one length, for one trained scheme.

    fields: position config fields of the longer model; with `replace` they are its whole
        position config (a different scheme, e.g. learned -> hierarchical), else they are set
        on top of the trained one.
    embed_rewrite: trained embed params (the scheme's `init_embed` pytree) -> the longer
        model's, or None when the params stay as they are.
    details: resolved settings (rows, factor, window, ...) for results and logs.
    global_only: the change applies to the global layers only; local (sliding-window) layers
        never see a distance past their window and keep their trained positions.
    """

    fields: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    replace: bool = False
    embed_rewrite: Optional[Callable[[Any], Any]] = None
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    global_only: bool = False

    def position_config(self, trained: Mapping[str, Any]) -> dict:
        """The longer model's position config (a plain dict) from the trained one."""
        return dict(self.fields) if self.replace else {**dict(trained), **self.fields}
