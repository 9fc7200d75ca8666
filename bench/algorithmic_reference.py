r"""The algorithmic benchmark's reference code trained as configs/algorithmic.py trains posjax:
its learning curve and step time, beside a posjax run's, to show that posjax learns a task
as fast as the code it reproduces (google-deepmind/randomized_positional_encodings).

The reference is not a package: clone it as DIR/randomized_positional_encodings, and run this
in an environment with its requirements (dm-haiku, chex, optax, tqdm, einshape, dm-tree),
which posjax does not need; it imports nothing from posjax.

    PYTHONPATH=DIR python -m bench.algorithmic_reference --task=duplicate_string \
        --encoding=NOISY_ROTARY --steps=1500 \
        --posjax=WORKDIR/metrics.jsonl     # a train.py run of configs/algorithmic.py

Settings are the reference's experiments/example.py (5 x 64, dropout 0.1, Adam 1e-3 with
clipping 1.0, batch 128, input lengths uniform in 1..40, its mean cross entropy); the
encoding is its enum's name (ROTARY, NOISY_ROTARY, RELATIVE, NOISY_RELATIVE, ALIBI, ...;
NOISY_* with noise_max_length 2048). Prints the mean training accuracy (the task's mask,
dropout on, as both codes log it) over each 100-step window, and posjax's over the same
windows when --posjax is given (train.py logs each window's pooled accuracy at its end).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

WINDOW = 100


def reference_run(task_name: str, encoding: str, steps: int, seed: int) -> list:
    """[(step, train accuracy)] of the reference's training, one entry a step."""
    import haiku as hk
    import jax.numpy as jnp
    from randomized_positional_encodings.experiments import constants, training, utils
    from randomized_positional_encodings.experiments import curriculum as curriculum_lib

    params = {"num_layers": 5, "embedding_dim": 64, "dropout_prob": 0.1,
              "positional_encodings": encoding}
    if encoding.startswith("NOISY"):
        params["positional_encodings_params"] = {"noise_max_length": 2048}
    task = constants.TASK_BUILDERS[task_name]()
    model = constants.MODEL_BUILDERS["transformer_encoder"](
        output_size=task.output_size, return_all_outputs=True, **params)
    model = hk.transform(utils.make_model_with_empty_targets(
        model, task, 0, task.output_length(10) == 1))

    def loss_fn(output, target):
        return jnp.mean(jnp.sum(task.pointwise_loss_fn(output, target), axis=-1)), {}

    def accuracy_fn(output, target):
        mask = task.accuracy_mask(target)
        return jnp.sum(mask * task.accuracy_fn(output, target)) / jnp.sum(mask)

    training_params = training.ClassicTrainingParams(
        seed=seed, model_init_seed=seed, training_steps=steps, log_frequency=1,
        length_curriculum=curriculum_lib.UniformCurriculum(values=list(range(1, 41))),
        batch_size=128, task=task, model=model, loss_fn=loss_fn, learning_rate=1e-3,
        l2_weight=0.0, accuracy_fn=accuracy_fn, compute_full_range_test=False,
        max_range_test_length=100, range_test_total_batch_size=512,
        range_test_sub_batch_size=64, is_autoregressive=False)
    results, _, _ = training.TrainingWorker(training_params, use_tqdm=False).run()
    # log_frequency=1: one record a step (the record of step 0 is the first update's)
    return [(r["step"] + 1, r["train_accuracy"]) for r in results]


def windows(curve: list, steps: int) -> dict:
    """{window end: mean accuracy over its steps} for windows of WINDOW steps."""
    out = {}
    for end in range(WINDOW, steps + 1, WINDOW):
        vals = [a for s, a in curve if end - WINDOW < s <= end]
        if vals:
            out[end] = statistics.fmean(vals)
    return out


def posjax_curve(path: str) -> list:
    """[(step, accuracy)] of a train.py metrics.jsonl: each log line's mean over its steps."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return [(r["step"], r["mlm_accuracy"]) for r in rows if "mlm_accuracy" in r]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="duplicate_string")
    p.add_argument("--encoding", default="NOISY_ROTARY", help="the reference's enum name")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--posjax", default=None, help="a posjax run's metrics.jsonl, same task")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    curve = reference_run(args.task, args.encoding, args.steps, args.seed)
    wall = time.perf_counter() - t0
    ref = windows(curve, args.steps)
    mine = {}
    if args.posjax:
        logged = dict(posjax_curve(args.posjax))  # posjax logs each window's mean at its end
        mine = {end: logged[end] for end in ref if end in logged}
    print(f"{args.task}, reference {args.encoding}, seed {args.seed}, {args.steps} steps, "
          f"{wall:.0f} s in all (a compile per input length included)")
    print("| steps | reference accuracy | posjax accuracy |")
    print("|---|---|---|")
    for end, acc in ref.items():
        other = f"{mine[end]:.4f}" if end in mine else ""
        print(f"| {end - WINDOW + 1}-{end} | {acc:.4f} | {other} |")


if __name__ == "__main__":
    main()
