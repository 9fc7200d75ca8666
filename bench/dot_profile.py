r"""Where a train step's time goes on XLA:CPU, dot product by dot product.

    python -m bench.dot_profile                  # the main job's step (configs/nezha.py)
    python -m bench.dot_profile --step=peer      # posjax's side of bench/peer_throughput.py
    python -m bench.dot_profile --step=long      # bench/long_attention_peer.py's training step
    python -m bench.dot_profile --step=algorithmic --config=reverse_string,xl,randomized
                                                 # one bucket of the algorithmic benchmark's step

Times the compiled step, then runs it under jax's profiler and joins the trace (op time of
every thunk, by instruction name) with the compiled HLO (the dots inside each library
fusion, hence its FLOPs). Prints the op time by kind of op, then every dot shape with its
ms per step, GFLOP per step and GFLOP/s, and last two bounds: what the step would save if
its batched dots (the attention products) ran at the unbatched dots' rate, and if every dot
ran at this machine's square-matmul rate. Start it with GLIBC_TUNABLES=glibc.malloc.hugetlb=1,
as train.py starts itself (posjax/host_memory.py): page faults otherwise inflate the dots.

Op time is summed over threads, so on two cores it can exceed the step's wall time; the
bounds are op-time savings, an upper bound on the wall time saved.
"""

from __future__ import annotations

import os
import tempfile
import time

from absl import app, flags

from posjax.training.dot_profile import op_times, report, thunk_dots

flags.DEFINE_enum("step", "main", ["main", "peer", "long", "algorithmic"],
                  "the main job's step, the peer bench's, or the long-input bench's (ModernBERT)")
flags.DEFINE_string("layout", "global", "--step=long: 'global' or 'local' (bench.long_attention_peer)")
flags.DEFINE_integer("length", 2048, "--step=long: tokens in its one row")
flags.DEFINE_string("config", "configs/nezha.py", "config file of --step=main; "
                    "configs/algorithmic.py's argument (task,scheme[,randomized]) of "
                    "--step=algorithmic")
flags.DEFINE_integer("bucket_input", 40, "--step=algorithmic: the input length whose tape "
                     "bucket is timed (40: the longest, 80 places for reverse_string)")
flags.DEFINE_string("shape", "small", "--step=peer: a shape of bench/peer_throughput.py "
                    "('algorithmic': the small-model benchmark's)")
flags.DEFINE_integer("steps", 6, "steps timed, and steps traced")
FLAGS = flags.FLAGS


def _step():
    """(compiled step, one_step): one_step() runs it once and returns what to block on."""
    if FLAGS.step == "long":  # jit(grad), no optimizer: the state stays as it is
        from bench.long_attention_peer import PosjaxSide, build_models

        tmp = tempfile.mkdtemp(prefix="posjax_dot_profile_models_")
        side = PosjaxSide(build_models(tmp)[FLAGS.layout][1], FLAGS.length, train=True,
                          attention="auto")
        compiled = side.grad.lower(side.state).compile()
        return compiled, lambda: compiled(side.state)
    if FLAGS.step == "peer":
        from bench.peer_throughput import SHAPES, PosjaxSide

        side = PosjaxSide(SHAPES[FLAGS.shape], "float32", "cpu")
        state, batches = side.state, side.batches
        compiled = side.step.lower(state, batches[0]).compile()
    elif FLAGS.step == "algorithmic":
        from bench.algorithmic_step import bucket_step

        compiled, state, batches = bucket_step(FLAGS.config, FLAGS.bucket_input)
    else:
        from bench.job_step import job_step
        from posjax.training import state as state_lib

        config, setup, batch_sh, batches = job_step(FLAGS.config)
        state = setup.init_fn()
        compiled = state_lib.make_train_step(setup, config, batch_sh).lower(
            state, batches[0]).compile()
    calls = [0]

    def one_step():
        nonlocal state
        state, metrics = compiled(state, batches[calls[0] % len(batches)])
        calls[0] += 1
        return metrics

    return compiled, one_step


def main(argv):
    del argv
    import jax

    from bench.peer_throughput import jax_matmul_peak

    compiled, one_step = _step()
    dots, names = thunk_dots(compiled.as_text())

    def run(n):
        for _ in range(n):
            out = one_step()
        jax.block_until_ready(out)

    run(3)
    t0 = time.perf_counter()
    run(FLAGS.steps)
    wall_ms = (time.perf_counter() - t0) / FLAGS.steps * 1000
    trace_dir = tempfile.mkdtemp(prefix="posjax_dot_profile_")
    jax.profiler.start_trace(trace_dir)
    run(FLAGS.steps)
    jax.profiler.stop_trace()
    peak = jax_matmul_peak("float32", 2048) / 1e9
    print(f"--step={FLAGS.step}, {FLAGS.steps} steps timed then traced, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}")
    print("\n".join(report(op_times(trace_dir, FLAGS.steps), dots, names, peak, wall_ms)))


if __name__ == "__main__":
    app.run(main)
