r"""Reproduction (3): several schemes, one small training budget, evaluated up to 8x the
training length (64 -> 512 tokens) on People's Daily.

Every run has the same body (hidden 128, 2 layers, 4 heads), data and steps; only
config.position differs. Learned tables get 'truncate' and 'hierarchical' (their default
methods), RoPE gets its scalings and ReRoPE, the others run as they are.

    nice -n 10 python eval.py --config=configs/experiments/schemes.py --out=bench/extrapolation/schemes

Variant ':tiny' (a few steps, lengths 16/32) checks the plumbing in about a minute of CPU.
"""

import ml_collections

from configs import base

SCHEMES = {
    "learned": dict(name="learned", rows=64),
    "sinusoidal": dict(name="sinusoidal"),
    "rope": dict(name="rope", interleaved=True),
    "alibi": dict(name="alibi"),
    "t5": dict(name="t5"),
    "nezha": dict(name="nezha"),
    "none": dict(name="none"),
}


def train_config(position: dict, arg=None):
    config = base.get_config()
    config.position = base.position(**position)
    m, d, t = config.model, config.data, config.train
    m.hidden, m.num_layers, m.num_heads, m.mlp_dim = 128, 2, 4, 512
    m.max_length = 64
    m.dropout = 0.0
    d.corpus, d.seq_len, d.batch_size = "peoples_daily", 64, 16
    d.heldout_fraction = 0.1
    t.steps, t.warmup_steps, t.learning_rate = 500, 50, 5e-3  # ~1.5 min each on a quiet CPU
    t.log_every, t.eval_every, t.checkpoint_every = 100, 500, 500
    if arg == "tiny":
        base.tiny(config)
        if "rows" in position:
            config.position = base.position(**dict(position, rows=16))
        m.max_length, d.seq_len = 16, 16
    return config


def get_config(arg=None):
    exp = ml_collections.ConfigDict()
    exp.name = "schemes"
    exp.workdir_root = "workdirs/experiments/schemes" + ("_tiny" if arg == "tiny" else "")
    exp.runs = ml_collections.ConfigDict(
        {name: train_config(position, arg) for name, position in SCHEMES.items()})
    e = exp.eval = ml_collections.ConfigDict()
    e.lengths = [64, 128, 256, 512] if arg != "tiny" else [16, 32]
    e.methods = ml_collections.FieldReference(None, field_type=list)  # each scheme's defaults
    e.logn = False
    e.alphas = [0.4]
    e.num_docs = 16 if arg != "tiny" else 2
    e.min_tokens = 16384 if arg != "tiny" else 0
    e.batch_tokens = 16384
    exp.continue_steps = 0
    exp.continue_length = 0
    return exp
