"""Pallas flash attention (posjax.kernels) on a GPU: correctness first, then speed and memory.

ONE prepared script for a short GPU session (bench/device.sh runs it), no network needed:

  1. correctness: the compiled kernel (interpret=False) against the reference attention
     (posjax.attention.attend(implementation='reference'), float32) for every fused scheme,
     values and gradients (q, k, v, scheme params), a length that is not a block multiple,
     padding mask, causal; max |error| relative to max |reference| per quantity.
  2. timing, bf16, bidirectional: posjax kernel per scheme vs jax.nn.dot_product_attention
     (implementation 'xla' and 'cudnn'; RoPE applied in XLA first, ALiBi/T5 as a MATERIALIZED
     [B, H, L, L] bias) and posjax's chunked XLA path, forward and forward+backward.
     Tokens per step fixed at B*L = 16k and H*D = 2048 (the FlashAttention benchmark setup).
     TFLOP/s = 4*B*H*Lq*Lk*D / time for the forward, 3.5x that (forward + 2.5x backward) for
     forward+backward; the position terms' own flops are not counted. Also the kernel with
     a padding mask (the last 1/8 of every row; training batches always carry one) with and
     without the per-tile skip (impl 'kernel+mask' vs 'kernel+mask-noskip'): the skip's
     lax.cond doubles the kernels' registers on GPU, and only a timing can say whether
     skipping the all-padding tiles pays for that. And RoPE rotated in XLA before the plain
     kernel ('kernel-xla-rotate', what the TPU layout does) against the in-kernel rotation,
     which spills registers on GPU at head dim 128 (bench/gpu_compile_h200.md). Peak
     memory = argument + output + temp bytes of the compiled executable (XLA memory
     analysis; Pallas kernels' on-chip scratch is not in it).

Cases run in priority order under a global --budget (seconds): cases left when it is spent are
printed as 'skipped (budget)'. A watchdog ends the process (after printing the table so far)
if one case runs past --case_timeout, so a hung compile cannot eat the session.

  python -m bench.kernels                         # GPU: the full run (see device.sh)
  python -m bench.kernels --interpret --tiny      # CPU: proves the script runs (not timed)
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np

from posjax.attention import attend
from posjax.kernels import flash_attention
from posjax.kernels.cases import bind_case

SCHEMES = {  # name -> config; the fused set of posjax.kernels.supports
    "none": {"name": "none"},
    "rope": {"name": "rope"},
    "rope_half": {"name": "rope", "interleaved": False},
    "xpos": {"name": "xpos"},
    "alibi": {"name": "alibi"},
    "kerple": {"name": "kerple"},
    "t5": {"name": "t5"},
    "shaw": {"name": "shaw", "max_relative_position": 16},
    "nezha": {"name": "nezha"},
    "deberta": {"name": "deberta"},
}
ROWS: list[str] = []  # the markdown table so far (printed by the watchdog too)


def emit(line: str) -> None:
    ROWS.append(line)
    print(line, flush=True)


class Watchdog:
    """Kills the process if one case runs past `limit` seconds (compiles cannot be
    interrupted from Python), after printing what was measured."""

    def __init__(self, limit: float):
        self.limit, self.deadline, self.label = limit, None, ""
        threading.Thread(target=self._run, daemon=True).start()

    def arm(self, label: str):
        self.label, self.deadline = label, time.time() + self.limit

    def disarm(self):
        self.deadline = None

    def _run(self):
        while True:
            time.sleep(1.0)
            if self.deadline is not None and time.time() > self.deadline:
                print(f"\nWATCHDOG: case '{self.label}' exceeded {self.limit:.0f}s; stopping.",
                      flush=True)
                print("\n".join(["", "Table so far:"] + ROWS), flush=True)
                os._exit(3)


def scheme_and_params(name, heads, dim, seed=0):
    scheme = bind_case(SCHEMES[name], heads, dim, 1 << 15)
    params = scheme.init_layer(jax.random.PRNGKey(seed))
    return scheme, params


def qkv(batch, length, heads, dim, dtype, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), 4)
    return [jax.random.normal(x, (batch, length, heads, dim), jnp.float32).astype(dtype)
            for x in keys]


# -- 1. correctness -------------------------------------------------------------------------


def correctness(args, watchdog) -> bool:
    batch, length, heads, dim = (1, 40, 2, 16) if args.tiny else (2, 1000, 4, 64)
    emit(f"\n### Correctness: kernel (interpret={args.interpret}) vs reference, float32, "
         f"B={batch} L={length} H={heads} D={dim}, causal, padding mask, blocks {args.block}")
    emit("| scheme | out | dq | dk | dv | params | ok |")
    emit("|---|---|---|---|---|---|---|")
    q, k, v, cot = qkv(batch, length, heads, dim, jnp.float32)
    valid = jnp.asarray([length, length - 37][:batch])
    kv_mask = jnp.arange(length)[None, :] < valid[:, None]
    names = ["rope", "alibi", "t5", "nezha"] if args.tiny else list(SCHEMES)
    all_ok = True
    for name in names:
        scheme, params = scheme_and_params(name, heads, dim)
        watchdog.arm(f"correctness {name}")

        def loss(impl, q, k, v, params):
            kw = dict(scheme=scheme, params=params, causal=True, kv_mask=kv_mask)
            if impl == "kernel":
                out = flash_attention(q, k, v, block_q=args.block, block_k=args.block,
                                      interpret=args.interpret, **kw)
            else:
                out = attend(q, k, v, implementation="reference", **kw)
            return jnp.sum(out * cot), out

        grad = lambda impl: jax.jit(jax.grad(lambda *a: loss(impl, *a),  # noqa: E731
                                             argnums=(0, 1, 2, 3), has_aux=True))
        try:
            gk, ok_ = grad("kernel")(q, k, v, params)
            gr, orf = grad("reference")(q, k, v, params)
            errs = [rel_err(ok_, orf)] + [rel_err(a, b) for a, b in zip(gk[:3], gr[:3])]
            perr = [rel_err(a, b) for a, b in zip(jax.tree.leaves(gk[3]), jax.tree.leaves(gr[3]))
                    if a.size and float(jnp.abs(b).max()) > 0]
            worst = max(errs + perr)
            ok = worst < 1e-3
            cells = [f"{e:.1e}" for e in errs] + [f"{max(perr):.1e}" if perr else "-"]
            emit(f"| {name} | " + " | ".join(cells) + f" | {'yes' if ok else 'NO'} |")
        except Exception as err:  # report and continue: one broken lowering is a finding
            ok = False
            emit(f"| {name} | error: {type(err).__name__}: {str(err).splitlines()[0][:120]} "
                 "| | | | | NO |")
            traceback.print_exc()
        watchdog.disarm()
        all_ok &= ok
    return all_ok


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6))


# -- 2. timing ------------------------------------------------------------------------------


def make_fn(impl, scheme_name, batch, length, heads, dim, block, interpret):
    """(function of q, k, v) for one implementation; materialized biases are built outside the
    timed function's inputs only in the sense that they are computed inside it (XLA fuses or
    materializes them, which is the point of the comparison)."""
    scheme, params = scheme_and_params(scheme_name, heads, dim)
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))
    if impl == "kernel-xla-rotate":  # RoPE as one XLA pass, then the plain kernel
        def rotated(q, k, v):
            q, k = scheme.rotate(params, q, k, pos, pos)
            return flash_attention(q, k, v, block_q=block, block_k=block, interpret=interpret)

        return rotated
    if impl.startswith("kernel"):
        extra = {}
        if impl != "kernel":  # padding mask: the last eighth of every row is padding
            extra["kv_mask"] = jnp.broadcast_to(jnp.arange(length) < length - length // 8,
                                                (batch, length))
            extra["skip_empty_tiles"] = not impl.endswith("noskip")
        return lambda q, k, v: flash_attention(q, k, v, scheme=scheme, params=params,
                                               block_q=block, block_k=block,
                                               interpret=interpret, **extra)
    if impl == "chunked":
        return lambda q, k, v: attend(q, k, v, scheme=scheme, params=params,
                                      implementation="chunked", block_q=128, block_k=128)

    def dpa(q, k, v):
        bias = None
        if scheme.rotate is not None:
            q, k = scheme.rotate(params, q, k, pos, pos)
        if scheme.bias is not None:  # [B, H, L, L] materialized
            bias = scheme.bias(params, pos, pos).astype(q.dtype)
        return jax.nn.dot_product_attention(q, k, v, bias=bias, implementation=impl,
                                            scale=scheme.logit_scale(dim))

    return dpa


def measure(fn, args_, backward: bool, repeats: int):
    if backward:
        def loss(q, k, v):
            return jnp.sum(fn(q, k, v).astype(jnp.float32))

        run = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    else:
        run = jax.jit(fn)
    compiled = run.lower(*args_).compile()
    mem = compiled.memory_analysis()
    peak = None
    if mem is not None:
        peak = (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
                - getattr(mem, "alias_size_in_bytes", 0))
    jax.block_until_ready(compiled(*args_))  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args_))
        times.append(time.perf_counter() - start)
    return float(np.median(times)), peak


def timing_cases(args):
    """(dim, length, impl, scheme) in priority order."""
    lengths = [64] if args.tiny else [int(x) for x in args.lengths.split(",")]
    dims = [16] if args.tiny else [int(x) for x in args.dims.split(",")]
    if args.tiny:
        per_dim = [("kernel", "none"), ("kernel", "rope"), ("xla", "none"), ("chunked", "none"),
                   ("kernel+mask", "none"), ("kernel+mask-noskip", "none"),
                   ("kernel-xla-rotate", "rope")]
    else:
        per_dim = [("kernel", "none"), ("cudnn", "none"), ("xla", "none"),
                   ("kernel", "rope"), ("cudnn", "rope"), ("kernel-xla-rotate", "rope"),
                   ("kernel", "alibi"),
                   ("cudnn", "alibi"), ("xla", "alibi"), ("kernel", "t5"), ("xla", "t5"),
                   ("kernel", "nezha"), ("chunked", "nezha"), ("chunked", "none"),
                   ("kernel+mask", "none"), ("kernel+mask-noskip", "none"),
                   ("kernel+mask", "rope"), ("kernel+mask-noskip", "rope")]
    cases = []
    for dim in dims:
        for length in lengths:
            for impl, scheme in per_dim:
                if dim != dims[0] and scheme not in ("none", "rope"):
                    continue  # second head dim: the plain and rotary kernels only
                cases.append((dim, length, impl, scheme))
    return cases


def timing(args, watchdog, started):
    emit(f"\n### Timing, bf16, bidirectional, B*L = {args.tokens} tokens, H*D = {args.width} "
         f"({jax.devices()[0].device_kind}); TFLOP/s = 4*B*H*L*L*D/t (fwd), x3.5 (fwd+bwd)")
    emit("| D | L | impl | scheme | fwd ms | fwd TFLOP/s | fwd peak MiB | fwd+bwd ms "
         "| fwd+bwd TFLOP/s | fwd+bwd peak MiB |")
    emit("|---|---|---|---|---|---|---|---|---|---|")
    for dim, length, impl, scheme in timing_cases(args):
        label = f"| {dim} | {length} | {impl} | {scheme} |"
        if time.time() - started > args.budget:
            emit(label + " skipped (budget) | | | | | |")
            continue
        batch = max(1, args.tokens // length)
        heads = max(1, args.width // dim)
        q, k, v, _ = qkv(batch, length, heads, dim, jnp.bfloat16)
        flops = 4.0 * batch * heads * length * length * dim
        cells = []
        for backward in (False, True):
            watchdog.arm(f"{label} backward={backward}")
            try:
                fn = make_fn(impl, scheme, batch, length, heads, dim, args.block, args.interpret)
                seconds, peak = measure(fn, (q, k, v), backward, args.repeats)
                total = flops * (3.5 if backward else 1.0)
                tflops = "n/a (interpret)" if args.interpret else f"{total / seconds / 1e12:.1f}"
                cells += [f"{seconds * 1e3:.2f}", tflops,
                          "-" if peak is None else f"{peak / 2**20:.1f}"]
            except Exception as err:
                msg = str(err).splitlines()[0][:60] if str(err) else ""
                kind = "OOM" if "RESOURCE_EXHAUSTED" in str(err) else type(err).__name__
                cells += [f"{kind}: {msg}", "", ""]
            watchdog.disarm()
        emit(label + " " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interpret", action="store_true", help="Pallas interpret mode (CPU)")
    parser.add_argument("--tiny", action="store_true", help="one tiny size (CPU smoke run)")
    parser.add_argument("--lengths", default="512,2048,8192,16384")
    parser.add_argument("--dims", default="64,128")
    parser.add_argument("--tokens", type=int, default=16384, help="B * L per step")
    parser.add_argument("--width", type=int, default=2048, help="H * D")
    parser.add_argument("--block", type=int, default=64, help="kernel block_q = block_k")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=330.0, help="seconds for everything")
    parser.add_argument("--case_timeout", type=float, default=90.0)
    parser.add_argument("--skip_correctness", action="store_true")
    args = parser.parse_args()
    if args.tiny:
        args.block, args.repeats, args.tokens, args.width = 16, 1, 128, 32
    started = time.time()
    print(f"jax {jax.__version__}, devices {jax.devices()}", flush=True)
    watchdog = Watchdog(args.case_timeout)
    ok = True if args.skip_correctness else correctness(args, watchdog)
    timing(args, watchdog, started)
    print(f"\ncorrectness {'PASSED' if ok else 'FAILED'}; total {time.time() - started:.0f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
