"""Cost of one local (sliding-window) encoder layer against one global layer on CPU.

One TransformerLayer (attention + MLP, post-LN, RoPE) forward + backward (gradients of the
layer's parameters and its input), attention on the chunked path for both, at several
lengths. Time: median of --repeats runs after one untimed run. Memory: XLA's analysis of the
compiled executable (argument + output + temp bytes), i.e. the peak XLA plans for.

  nice -n 5 python -m bench.local_layer_cost --lengths=2048,4096,8192,16384

The issue's targets (issue 18): local time grows at most 2.2x per doubling of the length, and
the local layer at 16k runs in under 15% of the global layer's time. Not a test: numbers go
into bench/RESULTS.md by hand.
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
flags.DEFINE_integer("repeats", 2, "timed runs (median reported)")
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


def _measure(length: int, window):
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
    jax.block_until_ready(compiled(state, x, pos))  # untimed first run
    times, cpu = [], []
    for _ in range(FLAGS.repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(compiled(state, x, pos))
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    # CPU seconds (all threads of this process) beside wall seconds: on a shared machine the
    # wall time also counts waiting for a core, the CPU time only this process's work.
    return statistics.median(times), statistics.median(cpu), peak


def main(argv):
    del argv
    lengths = [int(n) for n in FLAGS.lengths]
    print(f"one layer fwd+bwd, chunked, batch 1, hidden {FLAGS.hidden}, {FLAGS.heads} heads, "
          f"mlp {FLAGS.mlp}, RoPE, float32, blocks {FLAGS.block}, local window {FLAGS.window}")
    print("| tokens | local s (cpu s) | global s (cpu s) | local/global wall (cpu) | "
          "local x per doubling wall (cpu) | local MiB | global MiB |")
    print("|---|---|---|---|---|---|---|")
    previous, skip_global = None, False
    for length in lengths:
        local_s, local_c, local_b = _measure(length, FLAGS.window)
        global_s = global_c = global_b = None
        if not skip_global:
            global_s, global_c, global_b = _measure(length, None)
            skip_global = global_s > FLAGS.max_global_seconds
        growth = (f"{local_s / previous[0]:.2f} ({local_c / previous[1]:.2f})"
                  if previous else "-")
        ratio = f"{local_s / global_s:.1%} ({local_c / global_c:.1%})" if global_s else "-"
        g_s = f"{global_s:.3f} ({global_c:.3f})" if global_s else "skipped"
        g_b = f"{global_b / 2**20:.1f}" if global_b else "-"
        print(f"| {length} | {local_s:.3f} ({local_c:.3f}) | {g_s} | {ratio} | {growth} | "
              f"{local_b / 2**20:.1f} | {g_b} |", flush=True)
        previous = (local_s, local_c)


if __name__ == "__main__":
    app.run(main)
