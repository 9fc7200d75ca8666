r"""Su's log-n attention scaling (the "entropy-invariant" scale, kexue.fm/archives/8823), reproduced.

A small RoFormer (rotary, interleaved) is pretrained at 64 tokens on People's Daily; MLM
accuracy is measured at 64..1024 tokens with standard attention and with logits scaled by
log(n)/log(64) (n = keys attended). Published shape: log-n is better at every length past the
training length, about equal at it.

    nice -n 10 python eval.py --config=configs/experiments/logn.py --out=results/logn

Training at full 64-token rows, an encoder attends exactly 64 keys, so log(n)/log(64) = 1 there:
the log-n model IS the standard model at training time, and the two rows differ only past 64.
"""

from posjax.config import defaults
from configs.experiments.common import experiment, small_run


def train_config(arg=None):
    config = small_run(dict(name="rope", interleaved=True, base=10000.0), seq_len=64,
                       batch_size=16, steps=1500, warmup_steps=100)
    if arg == "tiny":  # smoke tests of the experiment plumbing
        defaults.tiny(config)
        config.data.seq_len = 16
    return config


def get_config(arg=None):
    tiny = arg == "tiny"
    # logn=True: every method also with logn_length = the training length
    return experiment(
        "logn", {"roformer64": train_config(arg)}, arg,
        lengths=[16, 32] if tiny else [64, 128, 256, 512, 1024], methods=["as_is"], logn=True)
