r"""Su's hierarchical decomposition of a learned table (kexue.fm/archives/7947), reproduced.

A BERT with a learned 128-row position table is pretrained at 128 tokens on People's Daily,
then evaluated at 128..8192 tokens: 'as_is' (the table alone: nothing past 128), 'truncate'
(independent 128-token windows) and 'hierarchical' with alpha in {0.2, 0.4, 0.45} (zero-shot).
Then a copy is trained 100 steps at 512 tokens with position.name='hierarchical' (alpha 0.4)
and evaluated again. Published shape: zero-shot hierarchical works past 128 without any
training and improves quickly with a short continued training at the longer length.

    nice -n 10 python eval.py --config=configs/experiments/hierarchical.py \
        --out=results/hierarchical
"""

from posjax.config import defaults
from configs.experiments.common import experiment, small_run


def train_config(arg=None):
    config = small_run(dict(name="learned", rows=128), seq_len=128, batch_size=8, steps=1500,
                       warmup_steps=100)
    if arg == "tiny":
        defaults.tiny(config)
        config.position = defaults.position("learned", rows=16)
        config.model.max_length, config.data.seq_len = 16, 16
    return config


def get_config(arg=None):
    tiny = arg == "tiny"
    exp = experiment(
        "hierarchical", {"bert128": train_config(arg)}, arg,
        lengths=[16, 32] if tiny else [128, 256, 512, 1024, 2048, 4096, 8192],
        methods=["as_is", "truncate", "hierarchical"], alphas=[0.2, 0.4, 0.45])
    # continued training: a NEW workdir <workdir_root>/<run>_hier<length>, alpha 0.4
    exp.continue_steps = 2 if tiny else 100
    exp.continue_length = 32 if tiny else 512
    exp.continue_alpha = 0.4
    return exp
