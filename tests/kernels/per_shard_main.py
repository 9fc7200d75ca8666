"""Run by test_per_shard.py in a subprocess with 4 simulated CPU devices (the pytest process
has one): flash_attention with shard_axes (shard_map over a 2 x 2 ('data', 'tensor') mesh)
against the same call unsharded, values and gradients, interpret mode. Prints one JSON line
{scheme: max |difference|}."""

from __future__ import annotations

import json
import os

# 4 devices; keep the test run's other flags (tests/conftest.py: fast compile)
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from posjax.kernels import flash_attention  # noqa: E402
from posjax.kernels.cases import bind_case  # noqa: E402

B, L, H, D = 4, 40, 4, 16
SCHEMES = {  # per-head params and tables (split with the heads), a shared table (replicated)
    "t5": {"name": "t5"},
    "deberta": {"name": "deberta", "bucket_size": 8, "max_position": 32},
    "shaw": {"name": "shaw", "max_relative_position": 4},
    "fox": {"name": "fox"},  # per-head token sums c (split with the heads)
}
# fox runs as a local layer too, with its positions given: the band's per-row check flag
# ('band_ok', split with the batch) decides inside each shard (64 tokens: the band is narrower
# than the 4 key blocks).
LOCAL = {"fox": dict(window=10, q_pos=True, length=64)}


def main() -> None:
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("data", "tensor"))
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    split = NamedSharding(mesh, P("data", None, "tensor"))
    whole = NamedSharding(mesh, P())
    diffs = {}
    for name, config in SCHEMES.items():
        local = dict(LOCAL.get(name, {}))
        length = local.pop("length", L)
        q, k, v, cot = (jax.random.normal(key, (B, length, H, D), jnp.float32) for key in keys)
        pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (B, length))
        kv_mask = pos < jnp.asarray([40, 33, 40, 20])[:, None]
        if local.pop("q_pos", False):
            local.update(q_pos=pos, k_pos=pos)
        scheme = bind_case(config, H, D, 1024)
        params = scheme.init_layer(jax.random.PRNGKey(1))

        def grads(shard_axes):
            def loss(q, k, v, params):
                out = flash_attention(q, k, v, scheme=scheme, params=params, kv_mask=kv_mask,
                                      causal=True, block_q=16, block_k=16, interpret=True,
                                      shard_axes=shard_axes, **local)
                return jnp.sum(out * cot), out

            return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True))

        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            sharded = grads(("data", "tensor"))(
                *(jax.device_put(x, split) for x in (q, k, v)), jax.device_put(params, whole))
        plain = grads(None)(q, k, v, params)
        diffs[name] = max(float(jnp.max(jnp.abs(a - b)))
                          for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(plain)))
    print(json.dumps(diffs))


if __name__ == "__main__":
    main()
