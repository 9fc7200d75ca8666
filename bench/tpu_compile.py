"""Compile the Pallas kernels for real TPUs on a machine WITHOUT a TPU (deviceless AOT).

With libtpu installed (`pip install -r requirements-tpu.txt`), jax can describe a
TPU slice it does not have (`jax.experimental.topologies.get_topology_desc("v5e:2x2", "tpu")`)
and `jax.jit(f).lower(<ShapeDtypeStructs placed on one of its devices>).compile()` runs
libtpu's whole compiler: the Mosaic passes of every Pallas kernel (vector layouts, VMEM
allocation; an oversized block fails here with CompileTimeScopedVmemOom) and XLA's TPU
pipeline around them. What it cannot tell: numbers (nothing runs) and speed.

Three parts per TPU generation (forward + both backward kernels, via jax.grad through
posjax.kernels.flash_attention with the default 'tpu' layout, blocks 128):

  coverage  every fused scheme, float32 and bfloat16, head dim 64, length 200 (not a block
            multiple), padding + segments + causal + log-n on
  scale     bfloat16, batch 1, head dim 64 and 128, 8k / 32k / 128k tokens, bidirectional:
            the largest array of the compiled program (optimized HLO, kernels' outputs
            included) grows linearly with length, next to what ONE materialized
            [B, H, L, L] float32 score array would take: the O(n) claim, read off the
            compiler. Temp bytes (XLA memory analysis) are shown too; they are not linear at
            small sizes because XLA's TPU memory-space assignment keeps small temporaries
            in VMEM, outside the HBM count.
  blocks    block sizes 128 / 256 / 512 at head dim 128: which fit the default scoped VMEM
  train     posjax's whole training step (model, MLM loss, LAMB, the sharded state) for a
            4-chip slice, mesh fsdp 2 x tensor 2 (the 'fsdp_tp' preset: heads split), with
            attention='kernel': the kernels run per shard in shard_map, as on a TPU pod

  JAX_PLATFORMS=cpu python -m bench.tpu_compile                     # all generations
  JAX_PLATFORMS=cpu python -m bench.tpu_compile --topologies v5e:2x2 --parts coverage
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time

import jax
import jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

from posjax.kernels import dispatch, flash_attention
from posjax.kernels.cases import FUSED_CASES, bind_case

TOPOLOGIES = ("v4:2x2x1", "v5e:2x2", "v5p:2x2x1", "v6e:2x2", "tpu7x:2x2x1")
SCHEMES = FUSED_CASES
SCALE_SCHEMES = ("none", "alibi", "t5", "nezha", "deberta")
SCALE_LENGTHS = (8192, 32768, 131072)
HEADS = 2


def tpu_device(topology: str):
    """Device 0 of a described (not present) TPU slice."""
    return topologies.get_topology_desc(topology, "tpu").devices[0]


def compile_grads(device, config: dict, *, batch: int, length: int, dim: int, dtype,
                  masks: bool, causal: bool, block: int | None = None):
    """Compile d(sum(flash_attention))/d(q, k, v, params) for `device`; the compiled
    executable. Raises what libtpu raises."""
    scheme = bind_case(config, HEADS, dim, 1 << 20)
    params = scheme.init_layer(jax.random.PRNGKey(0))
    place = SingleDeviceSharding(device)

    def spec(shape, dt):
        return jax.ShapeDtypeStruct(shape, dt, sharding=place)

    def grads(q, k, v, params, kv_mask, seg):
        extra = {}
        if masks:
            extra = dict(kv_mask=kv_mask, segment_ids=(seg, seg), logn_length=128)

        def loss(q, k, v, params):
            out = flash_attention(q, k, v, scheme=scheme, params=params, causal=causal,
                                  block_q=block, block_k=block, interpret=False, **extra)
            return jnp.sum(out.astype(jnp.float32))

        return jax.grad(loss, argnums=(0, 1, 2, 3))(q, k, v, params)

    x = spec((batch, length, HEADS, dim), dtype)
    p = jax.tree.map(lambda a: spec(a.shape, a.dtype), params)
    args = (x, x, x, p, spec((batch, length), jnp.bool_), spec((batch, length), jnp.int32))
    return jax.jit(grads).lower(*args).compile()


def _attempt(fn):
    """(compiled or None, seconds, error line or '')."""
    start = time.perf_counter()
    try:
        out = fn()
        return out, time.perf_counter() - start, ""
    except Exception as err:  # noqa: BLE001 - the point is to report what libtpu says
        first = (str(err).strip().splitlines() or [""])[0][:160]
        return None, time.perf_counter() - start, f"{type(err).__name__}: {first}"


_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "f32": 4, "s32": 4,
          "u32": 4, "f64": 8, "s64": 8}


def largest_array(hlo_text: str) -> tuple[str, int]:
    """(shape, bytes) of the largest array any instruction of the optimized HLO makes."""
    best = ("-", 0)
    for dtype, dims in re.findall(r"= ([a-z]+[0-9]*)\[([0-9,]*)\]", hlo_text):
        if dtype in _BYTES:
            size = _BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
            best = max(best, (f"{dtype}[{dims}]", size), key=lambda x: x[1])
    return best


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f}"


def coverage(topology, device) -> list[str]:
    rows = []
    for dtype in (jnp.float32, jnp.bfloat16):
        for name, config in SCHEMES.items():
            exe, secs, err = _attempt(lambda: compile_grads(
                device, config, batch=2, length=200, dim=64, dtype=dtype, masks=True,
                causal=True))
            status = "compiled" if exe is not None else f"FAILED {err}"
            dt = jnp.dtype(dtype).name
            rows.append(f"| {topology} | {name} | {dt} | {status} | {secs:.1f} |")
    return rows


def scale(topology, device) -> list[str]:
    rows = []
    for dim in (64, 128):
        for name in SCALE_SCHEMES:
            for length in SCALE_LENGTHS:
                exe, secs, err = _attempt(lambda: compile_grads(
                    device, SCHEMES[name], batch=1, length=length, dim=dim,
                    dtype=jnp.bfloat16, masks=False, causal=False))
                # What ONE materialized float32 [B, H, L, L] score array would take.
                dense = _mib(HEADS * length * length * 4)
                if exe is None:
                    rows.append(f"| {topology} | {name} | {dim} | {length} | FAILED {err} "
                                f"| | | {dense} |")
                    continue
                mem = exe.memory_analysis()
                shape, size = largest_array(exe.as_text())
                rows.append(f"| {topology} | {name} | {dim} | {length} | "
                            f"{_mib(mem.argument_size_in_bytes)} | {_mib(mem.temp_size_in_bytes)} "
                            f"| {shape} {_mib(size)} | {dense} | {secs:.1f} |")
    return rows


def blocks(topology, device) -> list[str]:
    rows = []
    for name in ("none", "t5", "nezha", "deberta"):
        for block in (128, 256, 512):
            exe, secs, err = _attempt(lambda: compile_grads(
                device, SCHEMES[name], batch=1, length=8192, dim=128, dtype=jnp.bfloat16,
                masks=True, causal=True, block=block))
            status = "compiled" if exe is not None else f"FAILED {err}"
            rows.append(f"| {topology} | {name} | {block} | {status} | {secs:.1f} |")
    return rows


TRAIN_CONFIGS = ("nezha", "roformer", "t5", "alibi")


def train_step(topology, devices) -> list[str]:
    import importlib

    import numpy as np

    from posjax import models
    from posjax.training import sharding
    from posjax.training import state as state_lib
    from posjax.training.optimizer import make_optimizer

    rows = []
    for name in TRAIN_CONFIGS:
        config = importlib.import_module(f"configs.{name}").get_config(None)
        config.model.vocab_size = 21128
        config.model.attention = "kernel"
        config.mesh.update(data=1, fsdp=2, tensor=2)
        batch, length = int(config.data.batch_size), int(config.data.seq_len)

        def build():
            mesh = sharding.make_mesh(config.mesh, devices=devices)
            rules = sharding.logical_rules(config.mesh)
            setup = state_lib.make_setup(config, mesh, rules, models.build_model, make_optimizer)
            ints = {k: np.zeros((batch, length), np.int32) for k in
                    ("input_ids", "token_type_ids", "positions", "segment_ids", "mlm_targets")}
            example = dict(ints, mlm_weights=np.zeros((batch, length), np.float32))
            if config.model.get("sop", False):
                example["sop_labels"] = np.zeros((batch,), np.int32)
            batch_sh = state_lib.batch_shardings(example, mesh)
            step = state_lib.make_train_step(setup, config, batch_sh)
            abstract = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=batch_sh[k])
                        for k, v in example.items()}
            return step.lower(setup.abstract_state, abstract).compile()

        exe, secs, err = _attempt(build)
        kind = config.position.name
        # Mosaic kernel calls in the compiled step (forward, dq, dkv per layer). None would mean
        # the kernels were traced in interpret mode: a program of XLA loops, not the kernels.
        kernels = exe.as_text().count('custom_call_target="tpu_custom_call"') if exe else 0
        status = ("compiled" if kernels else "FAILED: no Mosaic kernel in the program") \
            if exe is not None else f"FAILED {err}"
        rows.append(f"| {topology} | configs/{name}.py ({kind}) | {batch} x {length} "
                    f"| {status} | {kernels} | {secs:.1f} |")
    return rows


HEADERS = {
    "coverage": ["| topology | scheme | dtype | libtpu compile (fwd + dq + dkv) | s |",
                 "|---|---|---|---|---:|"],
    "scale": ["| topology | scheme | D | L | arguments MiB | temp MiB "
              "| largest array in the compiled program, MiB | one dense f32 score array, MiB "
              "| compile s |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|"],
    "blocks": ["| topology | scheme | block | D=128, L=8192, bf16, masks + causal | s |",
               "|---|---|---:|---|---:|"],
    "train": ["| topology | config (scheme) | batch x length | train step, attention='kernel', "
              "fsdp 2 x tensor 2 | Mosaic kernel calls | s |", "|---|---|---|---|---:|---:|"],
}
PARTS = {"coverage": coverage, "scale": scale, "blocks": blocks, "train": train_step}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", default=",".join(TOPOLOGIES))
    parser.add_argument("--parts", default="coverage,scale,blocks,train")
    args = parser.parse_args(argv)
    # Trace the kernels as on a TPU ('tpu' layout, Mosaic): the process itself runs on CPU.
    dispatch.target_backend = lambda: "tpu"
    failures = 0
    print(f"jax {jax.__version__}, libtpu deviceless compile, {time.strftime('%Y-%m-%d')}")
    for part in args.parts.split(","):
        print(f"\n### {part}\n")
        print("\n".join(HEADERS[part]), flush=True)
        for topology in args.topologies.split(","):
            devices = topologies.get_topology_desc(topology, "tpu").devices
            # train: 4 chips of the slice, one device per chip (v4 and TPU7x list both cores
            # of a chip, and a TPU mesh takes one device per chip); the others: device 0
            chips = [d for d in devices if getattr(d, "core_on_chip", 0) == 0]
            target = chips[:4] if part == "train" else devices[0]
            for row in PARTS[part](f"{topology} ({devices[0].device_kind})", target):
                failures += "FAILED" in row and part != "blocks"
                print(row, flush=True)
    print(f"\nfailures (coverage + scale): {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
