r"""The ModernBERT layer layout (sliding-window local layers plus global layers, each with
its own RoPE base) against plain RoPE and ALiBi, trained at 128 tokens on one budget and
evaluated out to 8192 (64x) on People's Daily.

    python eval.py --config=configs/experiments/modern.py --out=results/modern_seeds \
        --baseline=as_is

Every run has the same body (common.small_run: hidden 128, 4 heads, mlp 512, post-LN, no
dropout; 3 layers here), the same data stream and steps, and is trained once per seed of
common.SEEDS; only positions and the layout differ:

  modern  layer 0 global (RoPE base 160,000), layers 1-2 local: a 32-token window
          (|i - j| <= 16) with RoPE base 10,000, as ModernBERT (global every 3rd layer from
          layer 0, local_rope_theta 10k, global 160k)
  rope    every layer global, RoPE base 10,000
  alibi   every layer global, ALiBi (symmetric in an encoder)

Why a 32-token window: at 128 training tokens a local layer must be clearly narrower than the
row or it is a global layer in all but name; 32/128 = 1/4 of the row (ModernBERT-base: 128 of
1024 = 1/8 at pretraining), which still leaves each token 16 characters of context either side.
Both RoPE runs use the half-split pairing (ModernBERT's); the RoPE scalings of the evaluator
rescale the global layers only (see posjax/evaluation/methods.py).

Variant ':tiny' (a few steps, 32 tokens, window 8, lengths 32/64) checks the plumbing.
"""

from posjax.config import defaults
from configs.experiments.common import TINY_MASKED_TOKENS, experiment, small_run

SEQ_LEN, WINDOW, NUM_LAYERS = 128, 32, 3
# (position, layout) per run; layout fields go to config.model
RUNS = {
    "modern": (dict(name="rope", interleaved=False, base=160000.0),
               dict(local_window=WINDOW, global_every=3, global_first=True,
                    local_position={"base": 10000.0})),
    "rope": (dict(name="rope", interleaved=False, base=10000.0), {}),
    "alibi": (dict(name="alibi"), {}),
}
# 2000 steps of 8 x 128 tokens (2.0M tokens, 1024 per step as schemes.py): the budget the
# shared 2-core CPU allowed (throughput measured first).
STEPS, BATCH = 2000, 8


def train_config(position: dict, layout: dict, arg=None):
    config = small_run(position, seq_len=SEQ_LEN, batch_size=BATCH, steps=STEPS,
                       warmup_steps=100)
    config.model.num_layers = NUM_LAYERS
    if arg == "tiny":
        defaults.tiny(config)
        config.model.num_layers = NUM_LAYERS
        layout = dict(layout, local_window=8) if layout else layout
    for field, value in layout.items():
        config.model[field] = value
    return config


def get_config(arg=None):
    tiny = arg == "tiny"
    return experiment(
        "modern", {name: train_config(p, layout, arg) for name, (p, layout) in RUNS.items()},
        arg, lengths=[32, 64] if tiny else [128, 512, 2048, 8192],
        # as_is everywhere, YaRN on the two RoPE runs (not_applicable for ALiBi): what the
        # shared CPU allowed. A second pass with --methods=ntk (or rerope) adds those cells to
        # the same --out (same stream, same masks).
        methods=["as_is", "yarn"], alphas=[0.4],
        masked_tokens=TINY_MASKED_TOKENS if tiny else 8192)
