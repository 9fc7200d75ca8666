"""Corpus: algorithmic (one task's tapes from posjax.data.algorithmic, no text).

The length-generalization benchmark of Delétang et al. (ICLR 2023) and Ruoss et al. (ACL
2023), trained as their code (google-deepmind/randomized_positional_encodings) trains it.

    python train.py --config=configs/algorithmic.py:reverse_string,rope --workdir=/tmp/x
    python train.py --config=configs/algorithmic.py:reverse_string,rope,randomized ...
    python train.py --config=configs/algorithmic.py:parity_check,none,tiny ...

The argument is task[,scheme][,randomized][,tiny]: a task name (none: reverse_string), a
position scheme (default 'rope'), 'randomized' for Ruoss et al.'s randomized positions (an
ordered random subset of [0, 2048) per batch, at training and, as the reference does, at
evaluation), and 'tiny' for a test-sized model and run.

What the reference sets, and where it is read (models/transformer.py, experiments/example.py,
experiments/curriculum.py, experiments/training.py):
  model      5 layers, width 64, 8 heads of 8, FFN 4x (256), relu, post-LN (haiku LayerNorm,
             eps 1e-5), dropout 0.1 after attention and after the FFN (and after adding an
             additive position vector), embeddings * sqrt(64), no embedding LayerNorm, no
             q/k/v/output biases; a linear head (with bias) to the task's classes at the
             output places (posjax.models.tape_model says what still differs)
  tape       the input, then one empty token per output place (posjax.data.tape)
  lengths    uniform in 1..40, one length per batch (posjax.data.curriculum)
  init       haiku's: every Linear (q/k/v/output, FFN, the head, XL's R projection) a normal
             of stddev 1/sqrt(fan_in) truncated at 2 stddev (model.kernel_init='fan_in',
             position.w_r_init='fan_in'), the embeddings and XL's u, v stddev 0.02
  loss       the cross entropy averaged over every output place of the batch (its
             jnp.mean(jnp.sum(pointwise_loss, axis=-1)) sums over the classes of a one-hot)
  optimizer  Adam (b1 0.9, b2 0.999, eps 1e-8), global-norm clipping 1.0, constant learning
             rate, no weight decay: posjax's optimizer with no leaf decayed or trust-ratio'd
             (train.no_decay matches every parameter) is exactly that chain
  batch 128; learning rate 1e-3 and 10,000 steps: experiments/example.py, the only training
             settings the code holds. The papers trained far longer (their appendices; not
             re-read here), which a CPU cannot afford: raise train.steps where it can.
Every registered scheme of 1-D positions runs: model.max_length is 2048 (the randomized range,
and room for tapes of 500 inputs plus their outputs at evaluation); a causal-only scheme
(xpos) gets model.causal=True (the reference's encoder_causal_masking).
"""

from posjax.config import defaults
from posjax.data import algorithmic
from posjax.data.curriculum import longest_tape
from posjax.data.tape import bucket_length
from posjax.errors import ConfigError
from posjax.positions import make, names, scheme_class

RANDOMIZED_MAX_LENGTH = 2048  # Ruoss et al.'s noise_max_length
MAX_INPUT_LENGTH = 40
BUCKET = 16
# 'base' is the reference's size, which no flag gives too: the variant every config file takes
FLAGS = ("randomized", "tiny", "base")
DEFAULT_TASK = "reverse_string"  # no argument: the first task the papers' tables list


def parse(arg):
    """(task, scheme, flags) of 'task[,scheme][,randomized][,tiny]'."""
    parts = [p.strip() for p in (arg or "").split(",") if p.strip()]
    if not parts or parts[0] in FLAGS:
        parts = [DEFAULT_TASK] + parts
    task = algorithmic.get(parts[0]).name
    flags = {p for p in parts[1:] if p in FLAGS}
    rest = [p for p in parts[1:] if p not in FLAGS]
    if len(rest) > 1 or (rest and rest[0] not in names()):
        raise ConfigError("config variant", arg, "task[,scheme][,randomized][,tiny] with a "
                          f"scheme one of {', '.join(names())}")
    return task, (rest[0] if rest else "rope"), flags


def position(scheme: str):
    if scheme == "rope":  # the reference rotates neighbouring pairs (its _rope_kernel)
        return defaults.position("rope", base=10000.0, interleaved=True)
    if scheme == "xl":  # the reference projects R with an hk.Linear (haiku's init)
        return defaults.position("xl", w_r_init="fan_in")
    return defaults.position(scheme)


def get_config(arg=None):
    task_name, scheme, flags = parse(arg)
    task = algorithmic.get(task_name)
    tiny = "tiny" in flags
    config = defaults.get_config()
    config.position = position(scheme)
    if scheme_class(scheme).position_dims != 1:
        raise ConfigError("config variant", arg, f"a scheme of 1-D positions ('{scheme}' reads "
                          "(row, column) pairs; a tape has one position per place)")

    m = config.model
    m.hidden, m.num_layers, m.num_heads, m.mlp_dim = (16, 2, 2, 32) if tiny else (64, 5, 8, 256)
    m.activation = "relu"
    m.post_ln = True
    m.dropout = 0.1
    m.layer_norm_eps = 1e-5
    m.type_vocab_size = 0
    m.attention_bias = False
    m.mlp_bias = True
    m.embedding_style = "scaled"
    m.kernel_init = "fan_in"  # haiku's Linear: stddev 1/sqrt(fan_in); the tables stay 0.02
    m.output_classes = task.output_size
    m.max_length = RANDOMIZED_MAX_LENGTH
    # A causal-only scheme (xpos) runs the encoder with a causal mask, as the reference's
    # encoder_causal_masking option does; the output places still see the whole input.
    m.causal = bool(scheme_class(scheme).causal_only)

    d = config.data
    d.corpus = "algorithmic"
    d.task = task_name
    d.tokenizer = "task_symbols"
    d.vocab_size = None  # the task's symbols decide it
    d.max_input_length = 6 if tiny else MAX_INPUT_LENGTH
    d.bucket_multiple = 4 if tiny else BUCKET
    d.seq_len = bucket_length(longest_tape(task, d.max_input_length), d.bucket_multiple)
    d.batch_size = 8 if tiny else 128
    d.task_loss = "outputs"
    if "randomized" in flags:
        d.randomized_max_length = RANDOMIZED_MAX_LENGTH
        d.randomized_eval = True  # the reference's test-time positions are randomized too
        # Positions read inside attention (RoPE, relative, ALiBi, ...) draw again in every
        # layer, as the reference's noisy rotary / relative / ALiBi encodings do; an
        # embedding's (sin/cos, learned) once.
        d.randomized_layers = bool(make(config.position).attention_hooks)

    t = config.train
    t.learning_rate = 1e-3
    t.warmup_steps = 0
    t.schedule = "constant"
    t.weight_decay = 0.0
    t.no_decay = (".*",)  # every leaf: no decay, no trust ratio -> plain Adam
    t.clip_norm = 1.0
    t.b1, t.b2, t.eps = 0.9, 0.999, 1e-8
    if tiny:
        t.steps, t.log_every, t.eval_every, t.eval_batches, t.checkpoint_every = 6, 2, 6, 2, 6
    else:
        t.steps, t.log_every, t.eval_every, t.eval_batches = 10_000, 100, 1_000, 4
        t.checkpoint_every = 1_000
    return config
