"""Compile the GPU session's training steps for an H200 on a machine WITHOUT a GPU.

bench/device.sh's `peer` part trains posjax's BERT-base step on the device (batch 32, seq 512,
bf16, learned positions, attention='auto', which is the Pallas kernel on a GPU) beside a torch
worker, with jax given 45% of the GPU's memory. This compiles that same step, and NEZHA's at
BERT-base shapes (configs/nezha.py:base), against the deviceless H200 of bench/gpu_compile.py,
so that a failure to compile, or a step too large for its share of memory, shows up here
instead of in the device's few minutes. Nothing runs; the numbers are XLA's memory analysis
of the compiled program (arguments + outputs + temporaries, less the donated aliases).

Needs the CUDA environment of bench/gpu_compile.py (no GPU, no driver):
  .venv-cuda/bin/python -m bench.gpu_train_compile
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from bench.gpu_compile import ROOT, deviceless_device  # sets the deviceless environment

import jax
import numpy as np

from posjax.kernels import dispatch

GIB = 1024**3
H200_GIB = 139.0  # what the device reports usable (bench/device.sh prints nvidia-smi)
PEER_MEMORY_FRACTION = 0.45  # bench/peer_throughput.py's posjax worker on CUDA


def _configs(batch: int):
    from bench.peer_throughput import SHAPES, peer_config
    from bench.train_throughput import load_config

    peer = peer_config(dict(SHAPES["base"], batch=batch), "bfloat16")
    nezha = load_config("configs/nezha.py", "base")
    nezha.data.batch_size = batch
    nezha.model.vocab_size = SHAPES["base"]["vocab"]
    return {"peer bench (learned, dense rows)": (peer, True), "configs/nezha.py:base": (nezha, False)}


def compile_step(config, device, dense_rows: bool):
    """(compiled train step, lower + compile seconds)."""
    from posjax import models
    from posjax.training import sharding, state as state_lib
    from posjax.training.optimizer import make_optimizer

    # What attention='auto' resolves to on a GPU; this process's own backend is the CPU.
    config.model.attention = "kernel"
    models.validate_model_config(config, require_vocab=True)
    mesh = sharding.make_mesh(config.mesh, devices=[device])
    setup = state_lib.make_setup(config, mesh, sharding.logical_rules(config.mesh),
                                 models.build_model, make_optimizer)
    b, length = int(config.data.batch_size), int(config.data.seq_len)
    example = {k: np.zeros((b, length), np.int32) for k in
               ("input_ids", "token_type_ids", "positions", "segment_ids", "mlm_targets")}
    example["mlm_weights"] = np.zeros((b, length), np.float32)
    batch_sh = state_lib.batch_shardings(example, mesh)
    abstract = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=batch_sh[k])
                for k, v in example.items()}
    step = state_lib.make_train_step(setup, config, batch_sh, dense_rows=dense_rows)
    t0 = time.perf_counter()
    compiled = step.lower(setup.abstract_state, abstract).compile()
    return compiled, time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default=os.path.join(ROOT, "bench", "gpu_target_h200.txtpb"))
    p.add_argument("--batch", type=int, default=32, help="the peer part's batch")
    args = p.parse_args(argv)
    dispatch.target_backend = lambda: "gpu"  # the kernels' GPU (Triton) blocks and parameters
    device = deviceless_device(args.target)
    budget = PEER_MEMORY_FRACTION * H200_GIB
    print(f"jax {jax.__version__}; {device!r}; train step, bf16, batch {args.batch} x 512; "
          f"the peer worker's share of the GPU: {budget:.1f} GiB\n")
    print("| step | compiled | posjax kernels in the program | lower + compile s | arguments GiB "
          "| outputs GiB | temporaries GiB | peak GiB (less donated) | fits the share |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    failures = 0
    for name, (config, dense_rows) in _configs(args.batch).items():
        try:
            compiled, secs = compile_step(config, device, dense_rows)
        except Exception as e:  # the table is the product: report and go on
            failures += 1
            print(f"| {name} | NO: {type(e).__name__}: {str(e).strip()[:200]} | | | | | | | |")
            continue
        m = compiled.memory_analysis()
        peak = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                - m.alias_size_in_bytes) / GIB
        fits = peak < budget
        # the flash kernels' launches (fwd, dq, dkv per layer): 0 would mean the step fell back
        # to the chunked XLA path
        kernels = compiled.as_text().count('custom_call_target="__gpu$xla.gpu.triton"')
        failures += not fits or not kernels
        print(f"| {name} | yes | {kernels} | {secs:.1f} | {m.argument_size_in_bytes / GIB:.2f} "
              f"| {m.output_size_in_bytes / GIB:.2f} | {m.temp_size_in_bytes / GIB:.2f} "
              f"| {peak:.2f} | {'yes' if fits else 'NO'} |", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
