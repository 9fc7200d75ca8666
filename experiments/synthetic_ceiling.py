r"""Bayes-optimal MLM accuracy on the evaluator's own rows: the ceiling of the controlled
table-extension experiment (configs/experiments/synthetic.py).

    python -m experiments.synthetic_ceiling --workdir=workdirs/experiments/synthetic/learned \
        --lengths=64,192,512 --out=results/synthetic

For each length, the rows eval.py scores (the run's held-out stream, its fixed masks, cut
into rows of that length: posjax.data.heldout) get three numbers, each with the evaluator's
95% cluster-bootstrap interval (posjax.evaluation.stats.intervals):
  - oracle: the Bayes predictor that also knows which places were chosen (upper bound);
  - achievable: the Bayes predictor from the model's input alone, treating places as chosen
    independently at the mask rate (an accuracy some predictor reaches: a lower bound on
    the exact optimum, which lies between the two);
  - bag: an upper bound for any model without positions (posjax.data.synthetic.bag_bound).
Writes ceiling.json and ceiling.md to --out. Exit 2 with one line on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from absl import logging as absl_logging

from posjax import schema, startup
from posjax.errors import ConfigError


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True, help="a training workdir on corpus 'synthetic'")
    p.add_argument("--lengths", default="64,192,512")
    p.add_argument("--masked_tokens", type=int, default=32768)
    p.add_argument("--seed", type=int, default=0, help="seed of the masks (eval.py --seed)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    try:
        args.lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        raise ConfigError("--lengths", args.lengths, "comma-separated ints") from None
    return args


def ceiling(workdir: str, lengths: list[int], masked_tokens: int, seed: int) -> dict:
    from posjax.data import heldout, synthetic
    from posjax.evaluation.stats import intervals
    from posjax.evaluation.run import restore

    run = restore.open_run(workdir)
    config, tok = run.config, run.tokenizer
    if schema.view(config).data.corpus != "synthetic":
        raise ConfigError("--workdir", workdir, "a run trained on data.corpus='synthetic'")
    chain = synthetic.chain_of(config)
    state_of = synthetic.state_of_token(tok, chain.vocab)
    stream = heldout.build_stream(config, tok, masked_tokens, seed)
    rate = float(schema.view(config).data.mask_rate)
    out = {"workdir": os.path.abspath(workdir), "synthetic": synthetic.settings(config),
           "masked_tokens": masked_tokens, "seed": seed, "lengths": {}}
    for length in lengths:
        t0 = time.perf_counter()
        rows = heldout.stream_rows(stream, length, cls_id=tok.cls_id, sep_id=tok.sep_id)
        idx = rows.stream_index
        chosen = np.where(idx >= 0, stream.weights[np.maximum(idx, 0)] > 0, False)
        cell = {"rows": int(len(rows.cluster)), "clusters": int(np.unique(rows.cluster).size)}
        for name, know in (("oracle", True), ("achievable", False)):
            r = synthetic.bayes_accuracy(rows.arrays, chain, state_of, rate=rate,
                                         mask_id=tok.mask_id, special_ids=tok.special_ids,
                                         know_chosen=know, chosen=chosen)
            acc = intervals.ratio_interval(r["correct"], r["count"], clusters=rows.cluster)
            loss = intervals.ratio_interval(r["loss"], r["count"], clusters=rows.cluster)
            cell[name] = {"accuracy": acc, "loss": loss, "count": int(r["count"].sum())}
        bag = synthetic.bag_bound(rows.arrays)
        cell["bag"] = {"accuracy": intervals.ratio_interval(bag["correct"], bag["count"],
                                                            clusters=rows.cluster)}
        cell["wall_s"] = round(time.perf_counter() - t0, 1)
        out["lengths"][str(length)] = cell
        print(f"L={length}: oracle {cell['oracle']['accuracy'][0]:.4f}, achievable "
              f"{cell['achievable']['accuracy'][0]:.4f}, bag bound {cell['bag']['accuracy'][0]:.4f}"
              f" ({cell['oracle']['count']} tokens, {cell['wall_s']}s)", flush=True)
    return out


def markdown(result: dict) -> str:
    f = lambda t: f"{t[0]:.4f} [{t[1]:.4f}, {t[2]:.4f}]"  # noqa: E731
    lines = ["| length | tokens | clusters | oracle acc | achievable acc | achievable loss | "
             "bag bound (NoPE max) |", "|---|---|---|---|---|---|---|"]
    for length, c in result["lengths"].items():
        lines.append(f"| {length} | {c['oracle']['count']} | {c['clusters']} | "
                     f"{f(c['oracle']['accuracy'])} | {f(c['achievable']['accuracy'])} | "
                     f"{f(c['achievable']['loss'])} | {f(c['bag']['accuracy'])} |")
    return ("Bayes-optimal MLM accuracy on the evaluator's rows (95% cluster-bootstrap "
            "intervals). The exact optimum lies between 'achievable' and 'oracle'.\n\n"
            + "\n".join(lines) + "\n")


def main(argv=None) -> int:
    try:
        args = parse(argv)
        result = ceiling(args.workdir, args.lengths, args.masked_tokens, args.seed)
    except ConfigError as e:
        print(f"synthetic_ceiling: {e}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ceiling.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    with open(os.path.join(args.out, "ceiling.md"), "w") as fh:
        fh.write(markdown(result))
    return 0


if __name__ == "__main__":
    startup.start()  # before jax allocates: see posjax/startup.py
    absl_logging.set_verbosity(absl_logging.ERROR)  # orbax is chatty at INFO/WARNING (eval.py too)
    sys.exit(main())
