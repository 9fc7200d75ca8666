r"""Reproduction (2), hierarchical decomposition of a learned table (Su, kexue.fm/archives/7947).

A BERT with a learned 128-row position table is pretrained at 128 tokens on People's Daily,
then evaluated at 128..8192 tokens: 'as_is' (the table alone: nothing past 128), 'truncate'
(independent 128-token windows) and 'hierarchical' with alpha in {0.2, 0.4, 0.45} (zero-shot).
Then a copy is trained 100 steps at 512 tokens with position.name='hierarchical' (alpha 0.4)
and evaluated again. Published shape: zero-shot hierarchical works past 128 without any
training and improves quickly with a short continued training at the longer length.

    nice -n 10 python eval.py --config=configs/experiments/hierarchical.py \
        --out=bench/extrapolation/hierarchical
"""

import ml_collections

from configs import base


def train_config(arg=None):
    config = base.get_config()
    config.position = base.position("learned", rows=128)
    m, d, t = config.model, config.data, config.train
    m.hidden, m.num_layers, m.num_heads, m.mlp_dim = 128, 2, 4, 512
    m.max_length = 128
    m.dropout = 0.0  # a short run: regularization only slows it down
    d.corpus, d.seq_len, d.batch_size = "peoples_daily", 128, 8
    d.heldout_fraction = 0.1
    t.steps, t.warmup_steps, t.learning_rate = 1500, 100, 5e-3
    t.log_every, t.eval_every, t.checkpoint_every = 100, 500, 500
    if arg == "tiny":
        base.tiny(config)
        config.position = base.position("learned", rows=16)
        m.max_length, d.seq_len = 16, 16
    return config


def get_config(arg=None):
    exp = ml_collections.ConfigDict()
    exp.name = "hierarchical"
    exp.workdir_root = "workdirs/experiments/hierarchical" + ("_tiny" if arg == "tiny" else "")
    exp.runs = ml_collections.ConfigDict({"bert128": train_config(arg)})
    e = exp.eval = ml_collections.ConfigDict()
    e.lengths = [128, 256, 512, 1024, 2048, 4096, 8192] if arg != "tiny" else [16, 32]
    e.methods = ["as_is", "truncate", "hierarchical"]
    e.logn = False
    e.alphas = [0.2, 0.4, 0.45]
    e.num_docs = 4 if arg != "tiny" else 2
    e.min_tokens = 32768 if arg != "tiny" else 0  # short lengths: more rows
    e.batch_tokens = 16384
    # continued training: a NEW workdir <workdir_root>/<run>_hier<length>, alpha 0.4
    exp.continue_steps = 100 if arg != "tiny" else 2
    exp.continue_length = 512 if arg != "tiny" else 32
    exp.continue_alpha = 0.4
    exp.continue_methods = ["as_is"]  # the continued model runs with its trained alpha
    return exp
