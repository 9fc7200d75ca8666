"""The extrapolation evaluator's MLM scorer: LM head at the masked places only (the package's
metrics.make_scorer) vs full-vocabulary logits at every place (the previous scorer, kept as
the reference in tests/evaluation/test_metrics.py).

The model is the shape of the committed extrapolation runs (results/schemes_seeds:
hidden 128, 2 layers, 4 heads, vocabulary 4651, ALiBi so any length works), with random
params; rows are random tokens with 15% of the places masked; rows per batch as the sweep
picks them (16384 tokens). Memory is XLA's analysis of each compiled executable (temp +
output bytes); time is the median of --repeats runs after one untimed run. Both scorers'
per-bucket sums are compared (they must agree to ~1e-6).

  nice -n 10 python -m bench.eval_scorer --lengths=2048,8192
  python -m bench.eval_scorer --model=base --vocab=21128 --lengths=8192 --repeats=0

Not a test: the numbers go into bench/README.md by hand.
"""

from __future__ import annotations

import time

from absl import app, flags

# The reference scorer lives in the tests (tests.evaluation): run from the repository root.

flags.DEFINE_list("lengths", ["2048", "8192"], "row lengths")
flags.DEFINE_integer("batch_tokens", 16384, "tokens per batch (the sweep's default)")
flags.DEFINE_integer("vocab", 4651, "vocabulary size")
flags.DEFINE_integer("repeats", 3, "timed runs (the median is reported); 0: compile only "
                     "(memory, no run, no comparison)")
flags.DEFINE_enum("model", "small", ["small", "base"],
                  "small: the committed runs' shape; base: BERT-base (12 x 768, 12 heads, "
                  "float32; use --vocab=21128 --repeats=0 on a CPU)")
FLAGS = flags.FLAGS


def main(_):
    import jax
    import numpy as np
    from flax import nnx

    from posjax import models
    from posjax.evaluation.run import metrics
    from tests.evaluation.fixtures import tiny_config
    from tests.evaluation.test_metrics import full_logits_scorer

    config = tiny_config("alibi")
    shape = {"small": dict(hidden=128, num_layers=2, num_heads=4, mlp_dim=512),
             "base": dict(hidden=768, num_layers=12, num_heads=12, mlp_dim=3072)}[FLAGS.model]
    config.model.update(vocab_size=FLAGS.vocab, head_dim=None, embedding_dim=None, **shape)
    graphdef, state = nnx.split(models.build_model(config, nnx.Rngs(params=0)), nnx.Param)
    params, treedef = nnx.to_pure_dict(state), jax.tree.structure(state)
    new, old = metrics.make_scorer(graphdef, treedef, config), full_logits_scorer(graphdef, treedef)
    print(f"{'L':>6} {'rows':>4} {'scorer':>8} {'compile s':>9} {'run s':>7} {'temp MiB':>9} "
          f"{'out MiB':>8}  loss_sum / count")
    for length in (int(x) for x in FLAGS.lengths):
        config.data.seq_len = config.model.max_length = length
        rows = max(1, FLAGS.batch_tokens // length)
        rng = np.random.default_rng(length)
        weights = np.zeros((rows, length), np.float32)
        for r in range(rows):
            weights[r, 1 + rng.choice(length - 2, round(0.15 * (length - 2)), replace=False)] = 1
        ids = rng.integers(5, FLAGS.vocab, (rows, length)).astype(np.int32)
        batch = {"input_ids": np.where(weights > 0, 4, ids).astype(np.int32),
                 "token_type_ids": np.zeros((rows, length), np.int32),
                 "positions": np.tile(np.arange(length, dtype=np.int32), (rows, 1)),
                 "segment_ids": np.ones((rows, length), np.int32),
                 "mlm_targets": np.where(weights > 0, ids, 0).astype(np.int32),
                 "mlm_weights": weights}
        sums = {}
        for name, fn in (("masked", new), ("full", old)):
            t0 = time.perf_counter()
            compiled = fn.lower(params, batch).compile()
            compile_s = time.perf_counter() - t0
            mem = compiled.memory_analysis()
            if not FLAGS.repeats:
                print(f"{length:>6} {rows:>4} {name:>8} {compile_s:>9.2f} {'-':>7} "
                      f"{mem.temp_size_in_bytes / 2**20:>9.1f} "
                      f"{mem.output_size_in_bytes / 2**20:>8.2f}  arguments "
                      f"{mem.argument_size_in_bytes / 2**20:.1f} MiB", flush=True)
                continue
            out = jax.device_get(compiled(params, batch))  # untimed warm-up
            times = []
            for _ in range(FLAGS.repeats):
                t0 = time.perf_counter()
                jax.block_until_ready(compiled(params, batch))
                times.append(time.perf_counter() - t0)
            acc = metrics.Accumulator(metrics.bucket_edges(64, length))
            acc.add(*out)
            s = acc.summary(causal=False)
            sums[name] = [(b["loss_sum"], b["count"], b["correct"]) for b in s["buckets"]]
            print(f"{length:>6} {rows:>4} {name:>8} {compile_s:>9.2f} {np.median(times):>7.3f} "
                  f"{mem.temp_size_in_bytes / 2**20:>9.1f} {mem.output_size_in_bytes / 2**20:>8.2f}"
                  f"  {s['overall']['loss_sum']:.6f} / {s['overall']['count']}", flush=True)
        if not FLAGS.repeats:
            continue
        worst = max(abs(a[0] - b[0]) / max(abs(b[0]), 1e-30)
                    for a, b in zip(sums["masked"], sums["full"]))
        same = all(a[1:] == b[1:] for a, b in zip(sums["masked"], sums["full"]))
        print(f"{length:>6}: per-bucket loss_sum max relative difference {worst:.2e}; "
              f"counts and corrects identical: {same}", flush=True)


if __name__ == "__main__":
    app.run(main)
