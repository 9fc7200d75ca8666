r"""Reproduction (1), log-n attention scaling (Su, "entropy-invariant" scale, kexue.fm/archives/8823).

A small RoFormer (rotary, interleaved) is pretrained at 64 tokens on People's Daily; MLM
accuracy is measured at 64..1024 tokens with standard attention and with logits scaled by
log(n)/log(64) (n = keys attended). Published shape: log-n is better at every length past the
training length, about equal at it.

    nice -n 10 python eval.py --config=configs/experiments/logn.py --out=bench/extrapolation/logn

Training at full 64-token rows, an encoder attends exactly 64 keys, so log(n)/log(64) = 1 there:
the log-n model IS the standard model at training time, and the two rows differ only past 64.
"""

import ml_collections

from configs import base


def train_config(arg=None):
    config = base.get_config()
    config.position = base.position("rope", interleaved=True, base=10000.0)
    m, d, t = config.model, config.data, config.train
    m.hidden, m.num_layers, m.num_heads, m.mlp_dim = 128, 2, 4, 512
    m.max_length = 64
    m.dropout = 0.0  # a short run: regularization only slows it down
    d.corpus, d.seq_len, d.batch_size = "peoples_daily", 64, 16
    d.heldout_fraction = 0.1  # ~290 held-out articles: enough text for 1024-token windows
    t.steps, t.warmup_steps, t.learning_rate = 1500, 100, 5e-3
    t.log_every, t.eval_every, t.checkpoint_every = 100, 500, 500
    if arg == "tiny":  # smoke tests of the experiment plumbing
        base.tiny(config)
        d.seq_len = 16
    return config


def get_config(arg=None):
    exp = ml_collections.ConfigDict()
    exp.name = "logn"
    exp.workdir_root = "workdirs/experiments/logn" + ("_tiny" if arg == "tiny" else "")
    exp.runs = ml_collections.ConfigDict({"roformer64": train_config(arg)})
    e = exp.eval = ml_collections.ConfigDict()
    e.lengths = [64, 128, 256, 512, 1024] if arg != "tiny" else [16, 32]
    e.methods = ["as_is"]
    e.logn = True  # every method also with logn_length = the training length
    e.alphas = [0.2, 0.3, 0.4, 0.45]
    e.num_docs = 32 if arg != "tiny" else 2
    e.min_tokens = 32768 if arg != "tiny" else 0  # short lengths: more rows
    e.batch_tokens = 16384
    exp.continue_steps = 0
    exp.continue_length = 0
    return exp
