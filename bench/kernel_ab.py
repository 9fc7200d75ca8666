r"""A/B of CPU attention kernel sources at one shape, in ONE process: each source built under
its own FFI target names (bench/kernel_build.py, as bench.step_ab's `kernel:` variants), its forward and its
forward+backward compiled side by side and alternated call by call, so that the machine's
drift falls on every source alike. The first source is the baseline; give the same source
twice (a trailing comment makes it a second build) for a control.

    git show HEAD~1:posjax/attention/cpu_attention.cc > /tmp/old.cc
    cp /tmp/old.cc /tmp/old2.cc && echo '// control' >> /tmp/old2.cc
    python -m bench.kernel_ab --length=2048 --heads=6 --head_dim=64 \
        /tmp/old.cc /tmp/old2.cc posjax/attention/cpu_attention.cc

Prints each source's largest difference from the baseline (outputs and gradients, which a
change that keeps the sums' order leaves at 0), its median milliseconds per call, and the
median over rounds of baseline time / its time.
"""

from __future__ import annotations

import statistics
import time

from absl import app, flags

from bench.kernel_build import kernel_target

flags.DEFINE_integer("length", 2048, "queries and keys per row")
flags.DEFINE_integer("heads", 6, "heads")
flags.DEFINE_integer("head_dim", 64, "head dim")
flags.DEFINE_integer("batch", 1, "rows")
flags.DEFINE_integer("rounds", 9, "alternated rounds")
FLAGS = flags.FLAGS


def main(argv):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from posjax.attention import attend, native

    sources = argv[1:]
    if not sources:
        raise app.UsageError("give one or more kernel source files (the first: the baseline)")
    if not native._registered():
        raise SystemExit("kernel_ab: the CPU kernel did not build here (no compiler?)")
    rng = np.random.default_rng(0)
    shape = (FLAGS.batch, FLAGS.length, FLAGS.heads, FLAGS.head_dim)
    q, k, v = (jnp.asarray(rng.standard_normal(shape, dtype=np.float32)) for _ in range(3))

    def fn(q, k, v):
        return attend(q, k, v, implementation="rows")

    calls = {}
    for source in sources:
        saved = native.TARGET
        native.TARGET = kernel_target(source)
        try:
            forward = jax.jit(fn).lower(q, k, v).compile()
            grad = jax.jit(jax.grad(lambda *a: (fn(*a) ** 2).sum(), argnums=(0, 1, 2))).lower(
                q, k, v).compile()
        finally:
            native.TARGET = saved
        calls[source] = (forward, grad)
    base = sources[0]
    want = None
    for source, (forward, grad) in calls.items():
        got = (np.asarray(forward(q, k, v)), [np.asarray(g) for g in grad(q, k, v)])
        if want is None:
            want = got
            continue
        diff = max([float(np.abs(got[0] - want[0]).max())]
                   + [float(np.abs(a - b).max()) for a, b in zip(got[1], want[1])])
        print(f"{source}: max |difference| from {base}: {diff:.3g}")
    times = {s: ([], []) for s in sources}
    for _ in range(FLAGS.rounds):
        for source, (forward, grad) in calls.items():
            t0 = time.perf_counter()
            jax.block_until_ready(forward(q, k, v))
            t1 = time.perf_counter()
            jax.block_until_ready(grad(q, k, v))
            times[source][0].append(t1 - t0)
            times[source][1].append(time.perf_counter() - t1)
    print(f"B {FLAGS.batch}, L {FLAGS.length}, {FLAGS.heads} heads of {FLAGS.head_dim}, "
          f"{FLAGS.rounds} rounds")
    for source in sources:
        (fw, gr), (bf, bg) = times[source], times[base]
        print(f"{source}: forward {statistics.median(fw) * 1e3:.1f} ms, forward+backward "
              f"{statistics.median(gr) * 1e3:.1f} ms; baseline / this: forward "
              f"{statistics.median(a / b for a, b in zip(bf, fw)):.3f}x, forward+backward "
              f"{statistics.median(a / b for a, b in zip(bg, gr)):.3f}x")


if __name__ == "__main__":
    app.run(main)
