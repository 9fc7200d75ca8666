r"""Several schemes, one small training budget, evaluated up to 128x the
training length (64 -> 8192 tokens) on People's Daily, three training seeds each.

Every run has the same body (hidden 128, 2 layers, 4 heads), data and steps; only
config.position differs. Learned tables get 'truncate' and 'hierarchical' (their default
methods), RoPE gets its scalings and ReRoPE, the others run as they are.

    nice -n 19 python eval.py --config=configs/experiments/schemes.py --out=results/schemes_seeds

Variant ':logn' scores the RoPE runs (the same workdirs, trained by the command above if they
are missing) with and without log-n attention scaling, plain, YaRN and ReRoPE, 64 -> 8192:

    nice -n 19 python eval.py --config=configs/experiments/schemes.py:logn \
        --out=results/rope_logn_seeds --baseline=as_is

Both resume: a rerun trains only the runs without a finished checkpoint and scores only the
cells missing from --out/results.json (a run whose cells are all there needs no workdir).
The earlier 1-seed sweeps (read to 512, and to 8192 with other text per length) are in git
history (results/FINDINGS.md, Retired).

Variant ':tiny' (a few steps, lengths 16/32) checks the plumbing in about a minute of CPU.
"""

import ml_collections

from posjax.config import defaults
from posjax.errors import ConfigError
from configs.experiments.common import experiment, small_run

SCHEMES = {
    "learned": dict(name="learned", rows=64),
    "sinusoidal": dict(name="sinusoidal"),
    # Unit sinusoids drown BERT-init (std 0.02) word embeddings; x-transformers scales them.
    "sinusoidal_scaled": dict(name="sinusoidal", learned_scale=True),
    "rope": dict(name="rope", interleaved=True),
    "rope_values": dict(name="rope", interleaved=True, on_values=True),
    "alibi": dict(name="alibi"),
    "t5": dict(name="t5"),
    "nezha": dict(name="nezha"),
    "none": dict(name="none"),
    "conv": dict(name="conv", kernel_size=15, padding="zeros"),
    "fox": dict(name="fox"),
    "cope": dict(name="cope", npos=64),
    "pope": dict(name="pope"),
    # The decoder's absolute table has 64 rows: longer eval lengths are not_applicable.
    "deberta_emd": dict(name="deberta", emd=2, emd_rows=64),
    # 2024-2026 schemes, each at its paper's defaults (trained_length / rounding from the
    # model's 64-token max_length): RoPE without its long wavelengths, with them rounded, with
    # a learned log-n scale; Fourier dims; an MLP over the heads' logits and KERPLE biases;
    # stick-breaking in place of softmax; PaTH's data-dependent Householder products.
    "hope": dict(name="hope"),
    "resonance": dict(name="resonance"),
    "ssmax": dict(name="ssmax"),
    "fope": dict(name="fope"),
    "dape": dict(name="dape"),
    "stick_breaking": dict(name="stick_breaking"),
    "path": dict(name="path"),
}
# Not here: rope2d takes (row, column) positions, which text has not (validation refuses it on
# People's Daily); it is compared with 1-D positions on image patches in
# configs/experiments/patches.py.


def train_config(position: dict, arg=None):
    # 4000 steps (4.1M tokens): ~5 min each on a quiet 2-core CPU. 500 steps left every
    # model at the unigram level, where no scheme uses position and nothing can be ranked.
    config = small_run(position, seq_len=64, batch_size=16, steps=4000, warmup_steps=200)
    if arg == "tiny":
        defaults.tiny(config)
        if "rows" in position:
            config.position = defaults.position(**dict(position, rows=16))
        config.model.max_length, config.data.seq_len = 16, 16
    return config


def get_config(arg=None):
    if arg not in (None, "tiny", "logn"):
        raise ConfigError("config variant", arg, "none, 'tiny' or 'logn'")
    tiny, logn = arg == "tiny", arg == "logn"
    schemes = {"rope": SCHEMES["rope"]} if logn else SCHEMES
    return experiment(
        "schemes", {name: train_config(position, arg) for name, position in schemes.items()},
        arg, lengths=[16, 32] if tiny else [64, 512, 2048, 8192],  # 8x and 128x the training
        methods=(["as_is", "yarn", "rerope"] if logn
                 else ml_collections.FieldReference(None, field_type=list)),  # scheme defaults
        logn=logn, alphas=[0.4])
