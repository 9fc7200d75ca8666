"""T5 relative position buckets (Raffel et al. 2020) and the T5 bias scheme.

A learned scalar per (bucket, head) is added to the scaled logits. Distances are bucketed:
exact for small |distance|, logarithmic up to `max_distance`, one shared bucket beyond, so
the bias is defined at any length (one reason T5 extrapolates).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from posjax.positions.base import Dims, Params, Scheme
from posjax.positions.registry import register
from posjax.positions.relative_ops import key_minus_query


def t5_bucket(
    relative_position: jax.Array,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> jax.Array:
    """Bucket of each relative position (KEY minus QUERY position), int32 in [0, num_buckets).

    Follows flaxformer `RelativePositionBiases._relative_position_bucket` (and t5x, HF T5):
      n = -relative_position (query minus key: how far back the key is);
      bidirectional: half the buckets per side, +num_buckets/2 when the key is AFTER the
        query (n < 0), then n = |n|; causal: n = max(n, 0) (future keys share bucket 0);
      max_exact = (buckets per side) / 2: n < max_exact is its own bucket; beyond,
        max_exact + int(log(n/max_exact + eps) / log(max_distance/max_exact) * (per_side -
        max_exact)), capped at per_side - 1.
    Golden (bidirectional, 32/128): -1->1, -12->9, -127->15, +1->17, +8->24, +128->31.

    The log is taken in float32 whatever the run's dtype, and with flaxformer's
    `+ finfo(float32).eps`, which makes distances that are exact powers (16, 32, 64 here)
    land on their own bucket boundary instead of rounding one bucket low.
    """
    rel = jnp.asarray(relative_position).astype(jnp.int32)
    n = -rel
    per_side = num_buckets
    ret = jnp.zeros_like(n)
    if bidirectional:
        per_side = num_buckets // 2
        ret = ret + (n < 0).astype(jnp.int32) * per_side
        n = jnp.abs(n)
    else:
        n = jnp.maximum(n, 0)
    max_exact = per_side // 2
    is_small = n < max_exact
    ratio = n.astype(jnp.float32) / max_exact + np.finfo(np.float32).eps
    log_max = np.float32(math.log(max_distance / max_exact))
    # Same operation order as flaxformer (log / log_max * buckets) so floors agree. For
    # n < max_exact the value is negative but unused.
    large = jnp.log(ratio) / log_max * np.float32(per_side - max_exact)
    val_if_large = max_exact + large.astype(jnp.int32)
    val_if_large = jnp.minimum(val_if_large, per_side - 1)
    return ret + jnp.where(is_small, n, val_if_large)


def check_buckets(scheme: Scheme, bidirectional: bool, num_buckets, max_distance) -> None:
    """ConfigError unless t5_bucket(num_buckets, max_distance) is well defined."""
    if not (isinstance(num_buckets, int) and num_buckets >= 2):
        scheme.fail("num_buckets", num_buckets, "an int >= 2")
    if bidirectional and (num_buckets % 2 or num_buckets < 4):
        scheme.fail("num_buckets", num_buckets,
                    "an even int >= 4 for bidirectional buckets (half for each side)")
    per_side = num_buckets // 2 if bidirectional else num_buckets
    max_exact = per_side // 2
    if not (isinstance(max_distance, int) and max_distance > max_exact):
        scheme.fail("max_distance", max_distance,
                    f"an int > {max_exact} (the exact buckets; num_buckets={num_buckets})")


@register
@dataclasses.dataclass(frozen=True)
class T5(Scheme):
    """T5 bias: logits_ij += table[t5_bucket(pos_j - pos_i), h]; table [num_buckets, H].

    bidirectional: None (default) follows the model at bind time: True for encoders (16
    buckets a side), False for causal models (all 32 buckets on the past side). An explicit
    value must agree with the model; `check` raises a ConfigError when it contradicts it.
    share_layers=True (one table for all layers) is what T5 does.
    """

    name = "t5"
    bidirectional: Optional[bool] = None
    num_buckets: int = 32
    max_distance: int = 128
    share_layers: bool = True

    @property
    def bound_bidirectional(self) -> bool:
        """The bucket direction in use: the field, or (None) the bound model's."""
        if self.bidirectional is None:
            return not self.bound_dims.causal
        return self.bidirectional

    def init_layer(self, rng: jax.Array) -> Params:
        dims = self.bound_dims
        # t5x: variance_scaling(1.0, 'fan_avg', 'uniform') on the [heads, buckets] table.
        limit = math.sqrt(3.0 / ((self.num_buckets + dims.num_heads) / 2.0))
        table = jax.random.uniform(
            rng, (self.num_buckets, dims.num_heads), jnp.float32, -limit, limit)
        return {"table": table}

    def bound_values(self, dims: Dims) -> dict:
        return {"bidirectional": not dims.causal} if self.bidirectional is None else {}

    def check(self, dims: Dims, length: int) -> None:
        if self.bidirectional is not None and not isinstance(self.bidirectional, bool):
            self.fail("bidirectional", self.bidirectional,
                      "None (follow model.causal), True (encoder) or False (causal)")
        if self.bidirectional == dims.causal:
            want = not dims.causal
            self.fail("bidirectional", self.bidirectional,
                      f"{want} or None for a {'causal' if dims.causal else 'bidirectional'} "
                      f"model (model.causal={dims.causal}): causal models need causal buckets")
        bidirectional = not dims.causal if self.bidirectional is None else self.bidirectional
        check_buckets(self, bidirectional, self.num_buckets, self.max_distance)
        if not isinstance(self.share_layers, bool):
            self.fail("share_layers", self.share_layers, "True or False")

    def bias(self, params, q_pos, k_pos):
        bucket = t5_bucket(key_minus_query(q_pos, k_pos), bidirectional=self.bound_bidirectional,
                           num_buckets=self.num_buckets, max_distance=self.max_distance)
        values = jnp.take(params["table"].astype(jnp.float32), bucket, axis=0)  # [B,Lq,Lk,H]
        return jnp.transpose(values, (0, 3, 1, 2))
