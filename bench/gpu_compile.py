"""Compile the Pallas (Triton) kernels for an H100/H200 on a machine WITHOUT a GPU.

XLA:GPU can compile ahead of time against a described device: the CUDA PJRT plugin builds a
topology from a GpuTargetConfigProto (bench/gpu_target_h200.txtpb) when one is passed to
jax.experimental.topologies.get_topology_desc(platform='cuda', target_config=...), and no
driver or GPU is touched. jit(grads).lower(<ShapeDtypeStructs on that device>).compile() then
runs the whole GPU pipeline: the Pallas Triton lowering, XLA's Triton compiler (TTIR -> TTGIR
-> LLVM -> PTX for sm_90a) and ptxas (PTX -> cubin). So 'compiled' here means the cubin of the
forward, dq and dkv kernels exists; the kernels are NOT run (no numbers, no timing).

For every fused scheme x dtype x head dim x block size it compiles jax.grad of a
flash_attention loss (interpret=False, padding mask + segments + causal + log-n, the path with
every masking branch) and reports, per kernel, what XLA's thunk sequence says about the launch
(threads = 32 x num_warps, dynamic shared memory) and what `ptxas -v` says about the PTX XLA
produced (registers per thread, spill bytes), plus the resident CTAs per SM those imply.
The spill numbers agree with XLA's own ptxas run: with
xla_gpu_fail_ptx_compilation_on_register_spilling the cases listed here with spills fail and
those without compile. --baseline adds jax's own Pallas GPU attention for comparison.

Needs a separate environment with the CUDA wheels (no GPU and no driver needed):
  python3 -m venv .venv-cuda && .venv-cuda/bin/pip install "jax[cuda12]==0.10.2"
  .venv-cuda/bin/python -m bench.gpu_compile --baseline > bench/gpu_compile_h200.md
                                    # 88 compiles: 15 min on 2 shared cores
  .venv-cuda/bin/python -m bench.gpu_compile --schemes rope --dims 64 --blocks 64x64
The environment variables this needs (set below before jax is imported): JAX_PLATFORMS=cpu
(no CUDA client; the plugin still registers its topology factory) and
JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 (the plugin's version check calls cuInit, which fails
without a driver: "operation cuInit(0) failed: Unknown CUDA error 303").
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")

import jax
import jax.numpy as jnp
from jax.experimental import topologies

from posjax.kernels import dispatch, flash_attention
from posjax.kernels.cases import FUSED_CASES, bind_case

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCHEMES = FUSED_CASES
DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16}
# Table columns -> kernel names: posjax's three kernels; jax's own Pallas GPU attention
# (--baseline) has one forward and one fused dq+dkv backward kernel.
COLUMNS = {"fwd": ("posjax_flash_fwd", "mha_forward"), "dq": ("posjax_flash_dq",),
           "dkv": ("posjax_flash_dkv", "mha_backward")}
# sm_90 (CUDA C++ Programming Guide, compute capability 9.0): per-SM limits for occupancy.
SM_REGS, SM_SMEM, SM_THREADS, SM_CTAS = 65536, 233472, 2048, 32
CTA_RESERVED_SMEM = 1024  # shared memory the driver reserves per CTA on sm_8x/sm_9x
THUNK = re.compile(r"kCustomKernel .*?(\w+) grid: \[([^\]]*)\] "
                   r"threads: \[([^\]]*)\]\s+shared_memory: (\d+) bytes")


class CaptureStderr:
    """Collect what C++ writes to fd 2 (Triton's MLIR diagnostics: the real reason behind
    'Failed to compile Triton kernel') while still echoing it."""

    def __enter__(self):
        sys.stderr.flush()
        self.file = tempfile.TemporaryFile(mode="w+b")
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        self.text = self.file.read().decode(errors="replace")
        self.file.close()
        sys.stderr.write(self.text)
        return False

    def errors(self) -> list[str]:
        return [line for line in self.text.splitlines() if " error: " in line]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default=os.path.join(ROOT, "bench", "gpu_target_h200.txtpb"),
                   help="GpuTargetConfigProto text file")
    p.add_argument("--schemes", default=",".join(SCHEMES))
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--dims", default="64,128", help="head dims")
    p.add_argument("--blocks", default="64x64",
                   help="block_q x block_k requested; compiled GPU kernels take at most 64x64 "
                        "(dispatch.MAX_BLOCK_GPU), so larger requests compile the same kernels")
    p.add_argument("--length", type=int, default=2048)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--no_masks", action="store_true",
                   help="compile the unmasked, bidirectional path instead")
    p.add_argument("--baseline", action="store_true",
                   help="also compile jax's own Pallas GPU attention (jax.experimental.pallas."
                        "ops.gpu.attention.mha: segments + causal, its default 32x32 backward "
                        "blocks) as a reference point for registers and spills")
    p.add_argument("--num_warps", type=int, default=None,
                   help="override posjax's num_warps (8; layout.py)")
    p.add_argument("--num_stages", type=int, default=None, help="override num_stages (2)")
    p.add_argument("--dump_dir", default=None,
                   help="keep XLA's dumps (PTX, HLO, thunk sequence) here, one folder per case")
    p.add_argument("--ptxas", default=None, help="ptxas for -v (default: the CUDA wheel's)")
    return p.parse_args(argv)


def deviceless_device(target: str):
    """The one device of a GPU topology described by a GpuTargetConfigProto text file: XLA
    compiles for it, nothing runs."""
    with open(target) as fh:
        config_text = fh.read()
    return topologies.get_topology_desc(platform="cuda", target_config=config_text,
                                        topology="1x1x1").devices[0]


def find_ptxas(explicit):
    """The ptxas the CUDA wheels installed (what XLA itself uses), else the one on PATH."""
    if explicit:
        return explicit
    for base in sys.path:
        cand = os.path.join(base, "nvidia", "cuda_nvcc", "bin", "ptxas")
        if os.path.isfile(cand):
            return cand
    return shutil.which("ptxas")


def ptxas_stats(ptxas, ptx_path, arch):
    """(registers, spill store + load bytes, stack bytes) of the one entry in ptx_path."""
    res = subprocess.run([ptxas, "-v", f"-arch={arch}", ptx_path, "-o", os.devnull],
                         capture_output=True, text=True, timeout=300)
    text = res.stdout + res.stderr
    if res.returncode:
        raise RuntimeError(f"ptxas failed: {text.strip()[-500:]}")
    regs = int(re.search(r"Used (\d+) registers", text).group(1))
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                  text)
    stack, st, ld = (int(g) for g in m.groups()) if m else (0, 0, 0)
    return regs, st + ld, stack


def ctas_per_sm(regs, threads, smem):
    """Resident CTAs per SM: registers are allocated per warp in units of 256."""
    warps = -(-threads // 32)
    per_warp = -(-regs * 32 // 256) * 256
    by_regs = SM_REGS // (warps * per_warp)
    by_smem = SM_SMEM // (smem + CTA_RESERVED_SMEM)
    return min(by_regs, by_smem, SM_THREADS // threads, SM_CTAS)


def kernel_info(dump, ptxas):
    """Per kernel: threads, shared memory, grid (thunk sequence) + registers/spills (ptxas)."""
    info = {}
    seqs = glob.glob(os.path.join(dump, "*.thunk_sequence.txt"))
    text = open(seqs[0]).read() if seqs else ""
    for name, grid, threads, smem in THUNK.findall(text):
        threads = math.prod(int(t) for t in threads.split(","))  # "128, 1, 1"
        info[name] = {"threads": threads, "smem": int(smem), "grid": grid.replace(" ", "")}
    arch = "sm_90a"
    for path in glob.glob(os.path.join(dump, "*.ptx")):
        ptx = open(path).read()
        m = re.search(r"\.visible \.entry (\w+)\(", ptx)
        if not m or m.group(1) not in info:  # XLA's own fusions
            continue
        target = re.search(r"^\.target (\S+)", ptx, re.M)
        arch = target.group(1).rstrip(",") if target else arch
        entry = info.setdefault(m.group(1), {})
        if ptxas:
            entry["regs"], entry["spill"], entry["stack"] = ptxas_stats(ptxas, path, arch)
    for entry in info.values():
        if "regs" in entry and "threads" in entry:
            entry["ctas"] = ctas_per_sm(entry["regs"], entry["threads"], entry["smem"])
    return info, arch


def compile_case(device, config, dtype, dim, blocks, args, dump):
    B, L, H = args.batch, args.length, args.heads
    scheme = bind_case(config, H, dim, L)
    params = scheme.init_layer(jax.random.PRNGKey(0))
    sharding = jax.sharding.SingleDeviceSharding(device)

    def sds(shape, dt):
        return jax.ShapeDtypeStruct(shape, dt, sharding=sharding)

    masks = not args.no_masks

    def grads(q, k, v, params, kv_mask, seg):
        def loss(q, k, v, params):
            extra = dict(kv_mask=kv_mask, segment_ids=(seg, seg), causal=True,
                         logn_length=512) if masks else {}
            out = flash_attention(q, k, v, scheme=scheme, params=params, block_q=blocks[0],
                                  block_k=blocks[1], interpret=False, **extra)
            return jnp.sum(out.astype(jnp.float32))

        return jax.grad(loss, argnums=(0, 1, 2, 3))(q, k, v, params)

    x = sds((B, L, H, dim), dtype)
    p = jax.tree.map(lambda a: sds(a.shape, a.dtype), params)
    t0 = time.time()
    lowered = jax.jit(grads).lower(x, x, x, p, sds((B, L), jnp.bool_), sds((B, L), jnp.int32))
    t1 = time.time()
    compiled = lowered.compile(compiler_options={"xla_dump_to": dump})
    t2 = time.time()
    mem = compiled.memory_analysis()
    return {"lower_s": t1 - t0, "compile_s": t2 - t1,
            "temp_mib": mem.temp_size_in_bytes / 2**20 if mem else float("nan")}


def compile_baseline(device, dtype, dim, blocks, args, dump):
    """jax's reference Pallas Triton attention, same shapes, for comparison."""
    from jax.experimental.pallas.ops.gpu import attention as jax_attention

    B, L, H = args.batch, args.length, args.heads
    sharding = jax.sharding.SingleDeviceSharding(device)
    sizes = jax_attention.BlockSizes(block_q=blocks[0], block_k=blocks[1], block_q_dkv=32,
                                     block_kv_dkv=32, block_q_dq=32, block_kv_dq=32)

    def grads(q, k, v, seg):
        def loss(q, k, v):
            out = jax_attention.mha(q, k, v, None if args.no_masks else seg,
                                    causal=not args.no_masks, block_sizes=sizes)
            return jnp.sum(out.astype(jnp.float32))

        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

    x = jax.ShapeDtypeStruct((B, L, H, dim), dtype, sharding=sharding)
    seg = jax.ShapeDtypeStruct((B, L), jnp.int32, sharding=sharding)
    t0 = time.time()
    lowered = jax.jit(grads).lower(x, x, x, seg)
    t1 = time.time()
    compiled = lowered.compile(compiler_options={"xla_dump_to": dump})
    mem = compiled.memory_analysis()
    return {"lower_s": t1 - t0, "compile_s": time.time() - t1,
            "temp_mib": mem.temp_size_in_bytes / 2**20 if mem else float("nan")}


def override_compiler_params(num_warps, num_stages):
    """Exploration knob: replace layout.compiler_params' Triton settings."""
    from jax.experimental.pallas import triton as plgpu

    from posjax.kernels import layout

    original = layout.compiler_params

    def params(st, *args, **kwargs):
        base = original(st, *args, **kwargs)
        if st.backend != "gpu" or base is None:
            return base
        return plgpu.CompilerParams(
            num_warps=num_warps or base.num_warps,
            num_stages=num_stages or base.num_stages)

    layout.compiler_params = params


def compile_any(device, name, dtype, dim, blocks, args, dump):
    if name == "jax_mha":
        return compile_baseline(device, dtype, dim, blocks, args, dump)
    return compile_case(device, SCHEMES[name], dtype, dim, blocks, args, dump)


def cell(entry):
    if not entry or "regs" not in entry:
        return "?"
    spill = f"+{entry['spill']}B spill" if entry["spill"] else ""
    return (f"{entry['regs']}r{spill} {entry['smem'] / 1024:.0f}K w{entry['threads'] // 32} "
            f"x{entry['ctas']}")


def main(argv=None):
    args = parse_args(argv)
    dispatch.target_backend = lambda: "gpu"  # flash_attention picks Triton blocks/params for 'gpu'
    if args.num_warps or args.num_stages:
        override_compiler_params(args.num_warps, args.num_stages)
    device = deviceless_device(args.target)
    ptxas = find_ptxas(args.ptxas)
    ptxas_version = "none"
    if ptxas:
        out = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout
        ptxas_version = out.strip().splitlines()[-1] if out.strip() else "?"
    print(f"jax {jax.__version__}; target {os.path.basename(args.target)} -> {device!r}; "
          f"ptxas {ptxas} ({ptxas_version})")
    masks = "no masks, bidirectional" if args.no_masks else \
        "padding mask + segments + causal + log-n"
    print(f"jax.grad(flash_attention) w.r.t. q, k, v, params; B={args.batch} L={args.length} "
          f"H={args.heads}; {masks}\n")
    print("Cell: registers/thread [+spill bytes] (ptxas -v), dynamic shared memory, warps, "
          "x resident CTAs/SM (min over registers, shared memory, threads).\n")
    print("| scheme | dtype | D | blocks | compiled | lower s | compile s | temp MiB "
          "| fwd | dq | dkv |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    failures, root = [], args.dump_dir or tempfile.mkdtemp(prefix="gpu_compile_")
    names = args.schemes.split(",") if args.schemes else []
    for name in names + (["jax_mha"] if args.baseline else []):
        for dname in args.dtypes.split(","):
            for dim in (int(d) for d in args.dims.split(",")):
                for blk in args.blocks.split(","):
                    blocks = tuple(int(b) for b in blk.split("x"))
                    label = f"{name}_{dname}_d{dim}_{blk}"
                    dump = os.path.join(root, label)
                    head = f"| {name} | {dname} | {dim} | {blk} "
                    capture = CaptureStderr()
                    try:
                        with capture:
                            r = compile_any(device, name, DTYPES[dname], dim, blocks, args,
                                            dump)
                        info, _ = kernel_info(dump, ptxas)
                        found = [next((k for k in ks if k in info), None)
                                 for ks in COLUMNS.values()]
                        ok = "yes" if name == "jax_mha" or all(found) else "kernel missing"
                        print(head + f"| {ok} | {r['lower_s']:.1f} | {r['compile_s']:.1f} "
                              f"| {r['temp_mib']:.0f} | "
                              + " | ".join(cell(info.get(k)) if k else "-" for k in found)
                              + " |",
                              flush=True)
                    except Exception as e:  # report and go on: the table is the product
                        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
                        mlir = capture.errors()
                        if mlir:  # Triton's own reason, without the MLIR location
                            first += " / " + mlir[0].split(" error: ", 1)[1][:160]
                        print(head + f"| NO: {type(e).__name__}: {first} | | | | | | |",
                              flush=True)
                        failures.append((label, f"{type(e).__name__}: {e}\n"
                                         + "\n".join(mlir)))
                    if not args.dump_dir:
                        shutil.rmtree(dump, ignore_errors=True)
    if not args.dump_dir:
        shutil.rmtree(root, ignore_errors=True)
    for label, tb in failures:
        print(f"\n--- {label} ---\n{tb[-3000:]}")
    print(f"\n{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
