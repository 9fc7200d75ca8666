"""Cost of one local (sliding-window) encoder layer against one global layer on CPU.

One TransformerLayer (attention + MLP, post-LN, RoPE) forward + backward (gradients of the
layer's parameters and its input), attention on the chunked path for both, at several
lengths. Time: median of --repeats rounds after one untimed run, every length timed in turn
within each round. Memory: XLA's analysis of the compiled executable (argument + output +
temp bytes), i.e. the peak XLA plans for.

  nice -n 5 python -m bench.local_layer_cost --lengths=2048,4096,8192,16384

The targets: local time grows at most 2.2x per doubling of the length, and
the local layer at 16k runs in under 15% of the global layer's time. Not a test: numbers go
into bench/README.md by hand.
"""

from __future__ import annotations

import statistics
import time

from absl import app, flags

flags.DEFINE_list("lengths", ["2048", "4096", "8192", "16384"], "sequence lengths")
flags.DEFINE_integer("window", 128, "the local layer's window (tokens)")
flags.DEFINE_integer("hidden", 128, "model width")
flags.DEFINE_integer("heads", 4, "attention heads (head dim = hidden / heads)")
flags.DEFINE_integer("mlp", 256, "MLP width")
flags.DEFINE_integer("block", 128, "block_q = block_k of the chunked path")
flags.DEFINE_integer("repeats", 5, "timed rounds (median reported)")
flags.DEFINE_float("max_global_seconds", 600.0,
                   "skip the global layer at longer lengths once one run took longer than this")
FLAGS = flags.FLAGS


def _layer(length: int, window):
    import jax.numpy as jnp
    from flax import nnx

    from configs import base
    from posjax import positions
    from posjax.models.layers import TransformerLayer
    from posjax.models.spec import model_dims, validate_model_config

    config = base.get_config("tiny")
    m = config.model
    m.vocab_size, m.hidden, m.num_heads, m.mlp_dim = 64, FLAGS.hidden, FLAGS.heads, FLAGS.mlp
    m.num_layers, m.max_length, m.dropout = 1, length, 0.0
    m.attention, m.block_q, m.block_k = "chunked", FLAGS.block, FLAGS.block
    config.data.seq_len = length
    config.position = {"name": "rope"}
    spec = validate_model_config(config, require_vocab=True)
    scheme = positions.make(config.position).bind(model_dims(config))
    layer = TransformerLayer(spec, scheme, window=window, rngs=nnx.Rngs(params=0))
    return layer, jnp.arange(length, dtype=jnp.int32)[None]


def _batch(pos):
    from posjax.models.layers import AttentionInputs

    # One unpadded example per row (dense rows): no kv mask, no segments. Positions are an
    # input of the compiled step, as in training (constants would be folded at compile time).
    return {"positions": pos, "segment_ids": pos * 0 + 1,
            "attention": AttentionInputs(None, None, None)}


def _compile(length: int, window):
    """The compiled forward+backward of one layer at `length`, its arguments and XLA's peak."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    layer, pos = _layer(length, window)
    graph, state = nnx.split(layer)

    def loss(state, x, pos):
        out = nnx.merge(graph, state)(x, _batch(pos))
        return jnp.sum(out.astype(jnp.float32) ** 2)

    step = jax.jit(jax.grad(loss, argnums=(0, 1)))
    x = jnp.asarray(np.random.default_rng(0).standard_normal((1, length, FLAGS.hidden)),
                    jnp.float32)
    compiled = step.lower(state, x, pos).compile()
    stats = compiled.memory_analysis()
    peak = stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
    args = (state, x, pos)
    jax.block_until_ready(compiled(*args))  # untimed first run
    return compiled, args, peak


def _time(compiled, args):
    import jax

    start, start_cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(compiled(*args))
    # CPU seconds (all threads of this process) beside wall seconds: on a shared machine the
    # wall time also counts waiting for a core, the CPU time only this process's work.
    return time.perf_counter() - start, time.process_time() - start_cpu


def main(argv):
    del argv
    lengths = [int(n) for n in FLAGS.lengths]
    print(f"one layer fwd+bwd, chunked, batch 1, hidden {FLAGS.hidden}, {FLAGS.heads} heads, "
          f"mlp {FLAGS.mlp}, RoPE, float32, blocks {FLAGS.block}, local window {FLAGS.window}, "
          f"median of {FLAGS.repeats} interleaved rounds")
    # Everything is compiled first and then timed round-robin, all lengths in every round, so
    # a change of machine load between rounds touches every length alike instead of one.
    programs, skip_global = {}, False
    for length in lengths:
        programs[length, "local"] = _compile(length, FLAGS.window)
        if not skip_global:
            programs[length, "global"] = _compile(length, None)
            skip_global = _time(*programs[length, "global"][:2])[0] > FLAGS.max_global_seconds
    times = {key: [] for key in programs}
    for _ in range(FLAGS.repeats):
        for key, (compiled, args, _) in programs.items():
            times[key].append(_time(compiled, args))

    def median(key, column):
        return statistics.median(t[column] for t in times[key])

    print("| tokens | local s (cpu s) | global s (cpu s) | local/global wall (cpu) | "
          "local x per doubling wall (cpu) | same, range over rounds (wall) | local MiB | "
          "global MiB |")
    print("|---|---|---|---|---|---|---|---|")
    previous = None
    for length in lengths:
        local = (length, "local")
        local_s, local_c = median(local, 0), median(local, 1)
        growth = spread = "-"
        if previous is not None:
            growth = f"{local_s / median(previous, 0):.2f} ({local_c / median(previous, 1):.2f})"
            steps = [a[0] / b[0] for a, b in zip(times[local], times[previous])]
            spread = f"{min(steps):.2f}-{max(steps):.2f}"
        ratio = g_s = g_b = "-"
        if (length, "global") in programs:
            glob = (length, "global")
            ratio = f"{local_s / median(glob, 0):.1%} ({local_c / median(glob, 1):.1%})"
            g_s = f"{median(glob, 0):.3f} ({median(glob, 1):.3f})"
            g_b = f"{programs[glob][2] / 2**20:.1f}"
        print(f"| {length} | {local_s:.3f} ({local_c:.3f}) | {g_s} | {ratio} | {growth} | "
              f"{spread} | {programs[local][2] / 2**20:.1f} | {g_b} |", flush=True)
        previous = local


if __name__ == "__main__":
    app.run(main)
