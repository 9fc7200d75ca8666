"""What the small-scale reproductions share: one CPU-sized body and the experiment layout.

An experiment config (read by eval.py --config) names the training runs to make, where their
workdirs go, and the defaults of the sweep (`exp.eval`): the fields an experiment may set are
the options of posjax/evaluation/run/options.py that name an `experiment` path.
Every run is trained once per training seed (`seeds`, SEEDS by default; ':tiny' variants take
the first only): seed 0 keeps the run's name (and workdir), seed s > 0 is '<name>_seed<s>'.
eval.py trains only the seeds whose workdir has no finished checkpoint, and averages the
seeds of a run in every table (posjax.evaluation.derive.seeds groups runs that differ only in
config.seed).
"""

import copy

import ml_collections

from posjax.config import defaults
from posjax.evaluation.run import options


def small_run(position: dict, *, seq_len: int, batch_size: int, steps: int,
              warmup_steps: int) -> ml_collections.ConfigDict:
    """A CPU-sized MLM run on People's Daily (hidden 128, 2 layers, 4 heads, no dropout: a
    short run, where regularization only slows learning) trained at `seq_len` tokens."""
    config = defaults.get_config()
    config.position = defaults.position(**position)
    m, d, t = config.model, config.data, config.train
    m.hidden, m.num_layers, m.num_heads, m.mlp_dim = 128, 2, 4, 512
    m.max_length = seq_len
    m.dropout = 0.0
    d.corpus, d.seq_len, d.batch_size = "peoples_daily", seq_len, batch_size
    d.heldout_fraction = 0.1  # ~290 held-out articles: enough text for 1024-token windows
    t.steps, t.warmup_steps, t.learning_rate = steps, warmup_steps, 5e-3
    t.log_every, t.eval_every, t.checkpoint_every = 100, 500, 500
    return config


SEEDS = (0, 1, 2)
TINY_MASKED_TOKENS = 256  # ':tiny' variants score this many masked tokens per length  # a comparison that ranks schemes uses at least 3 training seeds


def with_seeds(runs: dict, seeds) -> dict:
    """Each run once per training seed: seed 0 keeps its name, seed s is '<name>_seed<s>'."""
    out = {}
    for name, config in runs.items():
        for seed in seeds:
            one = copy.deepcopy(config)
            one.seed = int(seed)
            out[name if seed == 0 else f"{name}_seed{seed}"] = one
    return out


def experiment(name: str, runs: dict, arg=None, *, lengths, methods, logn=False, alphas=None,
               masked_tokens=None, batch_tokens=options.default("batch_tokens"),
               seeds=SEEDS) -> ml_collections.ConfigDict:
    """The experiment: its runs (each per seed), workdir root (a separate one for ':tiny')
    and sweep defaults. No continued training unless the caller sets exp.continue_*."""
    exp = ml_collections.ConfigDict()
    exp.name = name
    exp.workdir_root = f"workdirs/experiments/{name}" + ("_tiny" if arg == "tiny" else "")
    exp.seeds = list(seeds[:1] if arg == "tiny" else seeds)
    exp.runs = ml_collections.ConfigDict(with_seeds(runs, exp.seeds))
    e = exp.eval = ml_collections.ConfigDict()
    e.lengths = lengths
    e.methods = methods
    e.logn = logn
    e.alphas = list(alphas) if alphas is not None else options.default("alphas")
    # one held-out stream, the same masked tokens at every length (few for ':tiny')
    e.masked_tokens = masked_tokens if masked_tokens is not None else (
        TINY_MASKED_TOKENS if arg == "tiny" else options.default("masked_tokens"))
    e.batch_tokens = batch_tokens
    exp.continue_steps = options.default("continue_steps")
    exp.continue_length = options.default("continue_length")
    return exp
