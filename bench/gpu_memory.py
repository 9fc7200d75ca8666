"""Memory of the fused kernels' forward + backward on an H200, read off the compiler without a
GPU (the deviceless CUDA target of bench/gpu_compile.py; same environment and variables).

For a scheme (default NEZHA, the O(n)-memory target of issue #6: "NEZHA at 16k runs in O(n)
memory") at growing lengths it compiles jax.grad of flash_attention w.r.t. q, k, v and params
(bf16, B=1, H=16, D=64, bidirectional) and prints XLA's memory analysis of the executable
(arguments, temp, their sum with the outputs) and the largest array anywhere in the compiled
program, next to what ONE dense [B, H, L, L] float32 score array would take.

  .venv-cuda/bin/python -m bench.gpu_memory
  .venv-cuda/bin/python -m bench.gpu_memory --scheme deberta --lengths 4096,16384
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")

import jax
import jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

from bench.gpu_compile import SCHEMES
from bench.tpu_compile import largest_array
from posjax.kernels import dispatch, flash_attention
from posjax.kernels.cases import bind_case

BENCH = os.path.dirname(os.path.abspath(__file__))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheme", default="nezha", choices=sorted(SCHEMES))
    parser.add_argument("--lengths", default="4096,16384,65536")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--target", default=os.path.join(BENCH, "gpu_target_h200.txtpb"))
    args = parser.parse_args(argv)
    dispatch.target_backend = lambda: "gpu"  # trace as on a GPU (Triton blocks and parameters)
    topo = topologies.get_topology_desc(platform="cuda", target_config=open(args.target).read(),
                                        topology="1x1x1")
    place = SingleDeviceSharding(topo.devices[0])
    heads, dim = args.heads, args.dim
    scheme = bind_case(SCHEMES[args.scheme], heads, dim, 1 << 20)
    params = scheme.init_layer(jax.random.PRNGKey(0))
    p = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=place), params)

    def loss(q, k, v, params):
        out = flash_attention(q, k, v, scheme=scheme, params=params, interpret=False)
        return jnp.sum(out.astype(jnp.float32))

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))
    print(f"{args.scheme}, bf16, B=1, H={heads}, D={dim}, fwd + bwd, {topo.devices[0].device_kind}"
          " (deviceless compile)\n")
    print("| L | arguments MiB | temp MiB | arguments + outputs + temp MiB | largest array MiB "
          "| one dense f32 score array |")
    print("|---:|---:|---:|---:|---|---:|")
    for length in (int(x) for x in args.lengths.split(",")):
        x = jax.ShapeDtypeStruct((1, length, heads, dim), jnp.bfloat16, sharding=place)
        exe = grads.lower(x, x, x, p).compile()
        mem = exe.memory_analysis()
        total = (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
                 - mem.alias_size_in_bytes)
        shape, size = largest_array(exe.as_text())
        dense = heads * length * length * 4 / 2**30
        print(f"| {length} | {mem.argument_size_in_bytes / 2**20:.1f} | "
              f"{mem.temp_size_in_bytes / 2**20:.1f} | {total / 2**20:.1f} | "
              f"{shape} {size / 2**20:.1f} | {dense:.1f} GiB |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
