r"""The attention op alone on CPU: posjax's paths against torch's scaled_dot_product_attention,
one worker process per variant, alternating (bench/alternate.py). The quick loop behind the
path and block choices of bench/long_attention_peer.md.

    nice -n 19 python -m bench.attention_op_peer --length=8192 --variants=torch,rows,chunked
    python -m bench.attention_op_peer --length=2048 --variants=torch,rows:64,rows:128 --grad

q, k, v [1, L, heads, 64] float32, no mask. A posjax variant is `implementation[:block_q]`
(posjax.attention.attend; block_k = block_q). --grad times forward + backward of sum(out)
(and nothing else: the output compared comes from an untimed forward).
Prints median wall and process CPU seconds per call and each variant's speed relative to the
first, after checking that every output matches the first's (--atol).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

import numpy as np

from bench import alternate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _inputs(length: int, heads: int):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((1, length, heads, 64)).astype(np.float32) for _ in range(3)]


def _torch_calls(q, k, v, grad: bool):
    """(output, timed): the output to compare, untimed, and the call to time."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    tq, tk, tv = (torch.from_numpy(x).transpose(1, 2).contiguous().requires_grad_(grad)
                  for x in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def output():
        with torch.inference_mode():
            return sdpa(tq, tk, tv).transpose(1, 2).numpy()

    def timed():
        if grad:
            sdpa(tq, tk, tv).sum().backward()
        else:
            output()

    return output, timed


def _posjax_calls(variant: str, q, k, v, grad: bool):
    """(output, timed) as _torch_calls."""
    import jax
    import jax.numpy as jnp

    import posjax.kernels  # noqa: F401  registers implementation='kernel' with attend
    from posjax.attention import attend

    implementation, _, block = variant.partition(":")
    block = int(block or 128)

    def fn(q, k, v):
        return attend(q, k, v, implementation=implementation, block_q=block, block_k=block)

    q, k, v = map(jnp.asarray, (q, k, v))
    forward = jax.jit(fn)
    step = jax.jit(jax.value_and_grad(lambda *a: fn(*a).sum(), argnums=(0, 1, 2)))

    def timed():
        jax.block_until_ready(step(q, k, v) if grad else forward(q, k, v))

    return lambda: np.asarray(forward(q, k, v)), timed


def worker(args) -> None:
    q, k, v = _inputs(args.length, args.heads)
    if args.worker == "torch":
        output, timed = _torch_calls(q, k, v, args.grad)
    else:
        output, timed = _posjax_calls(args.worker, q, k, v, args.grad)
    np.save(args.output, output())  # untimed, as is the first timed call (compile, warm-up)
    timed()
    alternate.serve({}, {"run": lambda n: dict(times=alternate.timed_calls(timed, int(n)))})


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--length", type=int, default=2048)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--variants", default="torch,rows,chunked")
    p.add_argument("--grad", action="store_true")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=2, help="calls per variant per round")
    p.add_argument("--atol", type=float, default=1e-5)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--output", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    variants = args.variants.split(",")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    workers, outputs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for name in variants:
                outputs[name] = os.path.join(tmp, f"{len(outputs)}.npy")
                cmd = [sys.executable, "-m", "bench.attention_op_peer", f"--worker={name}",
                       f"--length={args.length}", f"--heads={args.heads}",
                       f"--output={outputs[name]}"] + (["--grad"] if args.grad else [])
                workers[name] = alternate.Worker(name, cmd, env, ROOT)
                workers[name].read()
            first = np.load(outputs[variants[0]])
            for name in variants[1:]:
                diff = float(np.abs(np.load(outputs[name]) - first).max())
                if not diff <= args.atol:
                    raise SystemExit(f"{name}: max |out - {variants[0]}| = {diff:.3g}")
            times, _ = alternate.alternate(workers, args.rounds, f"run {args.steps}")
        finally:
            for w in workers.values():
                w.close()
    med = {n: [statistics.median(t[i] for t in times[n]) for i in (0, 1)] for n in variants}
    base = med[variants[0]]
    print(json.dumps(dict(length=args.length, grad=args.grad, load=os.getloadavg())))
    for n in variants:
        wall, cpu = med[n]
        print(f"{n:12s} wall {wall:.4f} s  cpu {cpu:.4f} s  speed vs {variants[0]}: wall "
              f"{base[0] / wall:.2f}x  cpu {base[1] / cpu:.2f}x")


if __name__ == "__main__":
    main()
