"""Peak memory and time of attention: reference vs chunked, forward and forward+backward.

Memory comes from XLA's analysis of the compiled executable (argument + output + temp bytes),
so a reference configuration that needs more than this machine has is reported as 'cannot
run' without trying to allocate it. Only configurations that fit (and whose length is in
--time_lengths) are executed and timed.

  nice -n 10 python -m bench.attention_memory --lengths=1024,2048,4096,8192,16384

Not a test: the latest numbers are summed up in bench/README.md by hand.
"""

from __future__ import annotations

import os
import time

from absl import app, flags

flags.DEFINE_list("lengths", ["1024", "2048", "4096", "8192", "16384"], "sequence lengths")
flags.DEFINE_list("time_lengths", None, "lengths to execute and time (default: all that fit)")
flags.DEFINE_list("schemes", ["rope", "t5", "nezha"], "registered scheme names")
flags.DEFINE_list("implementations", ["reference", "chunked"], "attend implementations")
flags.DEFINE_list("passes", ["fwd", "fwd+bwd"], "fwd and/or fwd+bwd")
flags.DEFINE_integer("heads", 12, "attention heads")
flags.DEFINE_integer("head_dim", 64, "head dimension")
flags.DEFINE_integer("batch", 1, "batch size")
flags.DEFINE_integer("block", 128, "block_q = block_k for chunked")
flags.DEFINE_integer("repeats", 2, "timed runs (the median is reported)")
flags.DEFINE_bool("warmup", True, "run once untimed first (the executable is compiled already)")
flags.DEFINE_float("memory_fraction", 0.6,
                   "run only configurations whose analysed peak is below this fraction of "
                   "MemAvailable (the machine is shared)")
flags.register_validator("passes", lambda ps: set(ps) <= {"fwd", "fwd+bwd"},
                         "passes are fwd and/or fwd+bwd")
FLAGS = flags.FLAGS


def _available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f}" if n >= 2**27 else f"{n / 2**30:.3f}"


def _build(scheme, params, length: int, implementation: str, backward: bool):
    import jax
    import jax.numpy as jnp

    import posjax.kernels  # noqa: F401  registers implementation='kernel' with attend
    from posjax.attention import attend

    def forward(q, k, v, params):
        return attend(q, k, v, scheme=scheme, params=params, implementation=implementation,
                      block_q=FLAGS.block, block_k=FLAGS.block)

    if backward:
        fn = jax.grad(lambda q, k, v, p: forward(q, k, v, p).astype(jnp.float32).sum(),
                      argnums=(0, 1, 2, 3))
    else:
        fn = forward
    shape = (FLAGS.batch, length, FLAGS.heads, FLAGS.head_dim)
    spec = jax.ShapeDtypeStruct(shape, jnp.float32)
    param_spec = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    compiled = jax.jit(fn).lower(spec, spec, spec, param_spec).compile()
    stats = compiled.memory_analysis()
    peak = stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
    return compiled, peak


def _time(compiled, params, length: int) -> float:
    import jax
    import numpy as np

    rng = np.random.RandomState(0)
    shape = (FLAGS.batch, length, FLAGS.heads, FLAGS.head_dim)
    q, k, v = (jax.numpy.asarray(rng.randn(*shape).astype(np.float32)) for _ in range(3))
    if FLAGS.warmup:
        jax.block_until_ready(compiled(q, k, v, params))
    times = []
    for _ in range(FLAGS.repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(q, k, v, params))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv):
    del argv
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    from posjax import positions
    from posjax.positions.base import Dims

    lengths = [int(x) for x in FLAGS.lengths]
    time_lengths = set(int(x) for x in FLAGS.time_lengths) if FLAGS.time_lengths else None
    print(f"# jax {jax.__version__} on {jax.devices()[0].device_kind}, "
          f"{os.cpu_count()} cpus, MemAvailable {_gib(_available_bytes())} GiB")
    print("| scheme | L | pass | reference GiB | chunked GiB | chunked/ref | reference s "
          "| chunked s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in FLAGS.schemes:
        try:
            scheme = positions.make(name)
        except Exception as err:  # noqa: BLE001 -- a scheme module still being written
            print(f"| {name} | - | - | scheme not available: {type(err).__name__}: {err} |")
            continue
        for length in lengths:
            dims = Dims(num_heads=FLAGS.heads, head_dim=FLAGS.head_dim,
                        hidden=FLAGS.heads * FLAGS.head_dim, max_length=length)
            bound = scheme.bind(dims)
            params = bound.init_layer(jax.random.PRNGKey(0))
            for backward in [p == "fwd+bwd" for p in FLAGS.passes]:
                peak, secs = {}, {}
                for impl in FLAGS.implementations:
                    compiled, peak[impl] = _build(bound, params, length, impl, backward)
                    fits = peak[impl] < FLAGS.memory_fraction * _available_bytes()
                    if not fits:
                        secs[impl] = "cannot run"
                    elif time_lengths is not None and length not in time_lengths:
                        secs[impl] = "not timed"
                    else:
                        secs[impl] = f"{_time(compiled, params, length):.2f}"
                    del compiled
                ratio = (f"{peak['chunked'] / peak['reference']:.1%}"
                         if {"chunked", "reference"} <= peak.keys() else "-")
                print(f"| {name} | {length} | {'fwd+bwd' if backward else 'fwd'} | "
                      f"{_gib(peak['reference']) if 'reference' in peak else '-'} | "
                      f"{_gib(peak['chunked']) if 'chunked' in peak else '-'} | "
                      f"{ratio} | {secs.get('reference', '-')} | {secs.get('chunked', '-')} |",
                      flush=True)


if __name__ == "__main__":
    app.run(main)
