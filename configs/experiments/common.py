"""What the small-scale reproductions share: one CPU-sized body and the experiment layout.

An experiment config (read by eval.py --config) names the training runs to make, where their
workdirs go, and the defaults of the sweep (`exp.eval`); see eval.py's EXPERIMENT_FIELDS.
"""

import ml_collections

from posjax import defaults


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


def experiment(name: str, runs: dict, arg=None, *, lengths, methods, logn=False, alphas,
               masked_tokens=32768, batch_tokens=16384) -> ml_collections.ConfigDict:
    """The experiment: its runs, workdir root (a separate one for ':tiny') and sweep defaults.
    No continued training unless the caller sets exp.continue_*."""
    exp = ml_collections.ConfigDict()
    exp.name = name
    exp.workdir_root = f"workdirs/experiments/{name}" + ("_tiny" if arg == "tiny" else "")
    exp.runs = ml_collections.ConfigDict(runs)
    e = exp.eval = ml_collections.ConfigDict()
    e.lengths = lengths
    e.methods = methods
    e.logn = logn
    e.alphas = alphas
    e.masked_tokens = masked_tokens  # one held-out stream, the same masked tokens at every length
    e.batch_tokens = batch_tokens
    exp.continue_steps = 0
    exp.continue_length = 0
    return exp
