"""Per-layer rematerialization (`model.remat`): the backward recomputes a layer's forward
instead of keeping its activations, so a training step holds about one layer's activations
at a time instead of every layer's.

  None   keep everything (the default: fastest when the memory is there).
  layer  keep each layer's input and its attention output (ATTENTION_OUT), recompute the
         rest (norms, projections, MLP): attention is the one recompute that costs more than
         it saves on long rows.
  full   keep each layer's input only; the backward recomputes attention too.

The numbers are the same as without remat (the same operations run again).

XLA:CPU note (bench/long_attention_peer.md, training memory): its default scheduler, tuned
for concurrency, runs a rematerialized forward as early as its inputs allow, that is during
the forward pass, so remat there costs time and saves nothing (temporaries 445 -> 417 MiB at
2048 tokens). With XLA's memory-minimizing scheduler
(XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false, set before jax starts)
`layer` brought the same step's temporaries from 296 to 150 MiB. (XLA:CPU expands
jax.checkpoint's optimization barriers before scheduling; XLA:GPU only after it.)
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
from flax import nnx

# The name the attention output is saved under (layers.SelfAttention tags it).
ATTENTION_OUT = "attention_out"

POLICIES = {
    "layer": jax.checkpoint_policies.save_only_these_names(ATTENTION_OUT),
    "full": None,
}
CHOICES = tuple(POLICIES)  # the schema's REMAT (tests/models/test_remat.py)


def rematerialized(call: Callable, remat: Optional[str]) -> Callable:
    """`call(module, *args)` itself for remat=None, else wrapped in nnx.remat with the
    policy `remat` names. Arguments other than `module` are arrays or pytrees of arrays
    (an nnx.Rngs, or None, may be among them)."""
    if remat is None:
        return call
    # prevent_cse: outside a scan, XLA would otherwise merge the recomputation with the
    # forward it repeats.
    return nnx.remat(call, policy=POLICIES[remat], prevent_cse=True)
