r"""Which schemes and methods USE context far past the training length? The eight
schemes of configs/experiments/schemes.py (same body, data and steps), each trained at 64
tokens with passkey and copy_span rows mixed into the MLM rows
(config.data.tasks, posjax/data/tasks), then tested on those tasks at 64 ... 8192 tokens with
every method of its scheme (eval.py --tasks): exact match per length x depth, heatmaps per
(run, method), one accuracy-vs-length plot per task.

    nice -n 10 python eval.py --config=configs/experiments/tasks.py --out=results/tasks_seeds

Three training seeds per scheme (experiment configs' default). Resumable: a rerun trains
only the runs without a finished checkpoint and evaluates only the cells missing from
--out/results.json. The runs are trained from scratch with the tasks mixed in.

Variant ':tiny' (4 steps at 32 tokens, lengths 32/64, 2 rows per depth) checks the plumbing.
"""

import ml_collections

from configs.experiments.common import experiment
from configs.experiments.schemes import SCHEMES, train_config
from posjax.config import defaults

# The eight: the schemes of the first sweep to 8192 tokens, not every scheme schemes.py
# has gained since, so the grid stays within its CPU budget.
EIGHT = ("learned", "sinusoidal", "sinusoidal_scaled", "rope", "alibi", "t5", "nezha", "none")
TASKS = {"passkey": 0.4, "copy_span": 0.4}  # fraction of training rows; the rest stay MLM
LENGTHS = [64, 128, 256, 512, 1024, 2048, 4096, 8192]


def task_config(position: dict, arg=None):
    config = train_config(position, arg)
    config.data.tasks = dict(TASKS)
    if arg == "tiny":  # 16 tokens cannot hold a 5-digit key and its cue: 32 tokens
        if "rows" in position:
            config.position = defaults.position(**dict(position, rows=32))
        config.model.max_length, config.data.seq_len = 32, 32
    return config


def get_config(arg=None):
    tiny = arg == "tiny"
    exp = experiment(
        "tasks", {name: task_config(SCHEMES[name], arg) for name in EIGHT},
        arg, lengths=[32, 64] if tiny else LENGTHS,
        methods=ml_collections.FieldReference(None, field_type=list),  # each scheme's defaults
        alphas=[0.4])
    exp.eval.tasks = ["passkey", "copy_span"]
    # rows per depth (5 depths): a 50-row cell at 8192 tokens took ~6 min on the shared
    # 2-core CPU, so 4 (20 rows a cell) is what keeps the whole grid near 3 hours
    exp.eval.task_rows = 2 if tiny else 4
    exp.eval.task_digits = 5
    return exp
