r"""The algorithmic length-generalization grid of Delétang et al. (ICLR 2023) and Ruoss et al.
(ACL 2023): tasks x the papers' encodings x {plain, randomized positions} x 3 training seeds,
each run configs/algorithmic.py's reference setup (5 x 64, batch 128, inputs 1..40).

    nice -n 10 python eval.py --config=configs/experiments/algorithmic.py:core \
        --out=results/algorithmic

trains every run without a finished checkpoint, then scores each (posjax.evaluation.
algorithmic: resumable, one run at a time) at every training length 1..40 and at the test
lengths 41, 50, ..., 500 (every 9th, both ends in: 52 of the reference's 460, so the grid's
evaluation stays a small part of its training on a CPU), 32 test sequences per length (the
same for every run; the intervals' clusters), with the reference's test-time behaviour:
dropout on, and randomized runs tested with randomized positions (eval.py --test_dropout,
--test_positions change it).

Variants: 'core' = the core grid, 3 tasks x {rope, xl} x {plain, randomized} x 3 seeds (36
runs); None = the whole grid, the core plus the papers' other encodings (alibi, sinusoidal,
none, learned) and 5 more tasks (264 runs; the same workdir root, so the core's runs are
reused); 'tiny' = the plumbing (2 runs, the tiny model, first seed). Run names are
'<task>_<scheme>' and '<task>_<scheme>_randomized' (plus '_seed<s>'). Randomization is left
out for 'none' (no positions to randomize).

Cost: bench/algorithmic_step.py measured 0.81 s a step over the curriculum (reverse_string,
RoPE) on the shared 2-core CPU at load ~7.5, so 10,000 steps are ~2 h a run there; tapes of
duplicate_string (up to 120 places) cost more.
"""

import ml_collections

from configs import algorithmic
from configs.experiments.common import experiment
from posjax.errors import ConfigError

CORE_TASKS = ("reverse_string", "duplicate_string", "binary_addition")
TASKS = CORE_TASKS + ("missing_duplicate_string", "odds_first", "bucket_sort",
                      "stack_manipulation", "parity_check")
CORE_SCHEMES = ("rope", "xl")  # RoPE and relative (Transformer-XL), the papers' 'relative'
SCHEMES = CORE_SCHEMES + ("alibi", "sinusoidal", "none", "learned")
TEST_LENGTHS = list(range(41, 501, 9))  # 41, 50, ..., 500
LENGTHS = list(range(1, 41)) + TEST_LENGTHS  # the training lengths too: learned at all?


def _runs(tasks, schemes, tiny: bool) -> dict:
    runs = {}
    for task in tasks:
        for scheme in schemes:
            for randomized in (False, True):
                if randomized and scheme == "none":
                    continue
                arg = ",".join([task, scheme] + (["randomized"] if randomized else [])
                               + (["tiny"] if tiny else []))
                name = f"{task}_{scheme}" + ("_randomized" if randomized else "")
                runs[name] = algorithmic.get_config(arg)
    return runs


def get_config(arg=None):
    tiny = arg == "tiny"
    if tiny:
        runs = _runs(CORE_TASKS[:1], CORE_SCHEMES[:1], tiny=True)
    elif arg == "core":
        runs = _runs(CORE_TASKS, CORE_SCHEMES, tiny=False)
    elif arg is None or arg == "":
        runs = _runs(CORE_TASKS, CORE_SCHEMES, tiny=False)
        runs.update(_runs(CORE_TASKS, SCHEMES[2:], tiny=False))
        runs.update(_runs(TASKS[3:], SCHEMES, tiny=False))
    else:
        raise ConfigError("config variant", arg, "none, 'core' or 'tiny'")
    exp = experiment(
        "algorithmic", runs, arg, lengths=[3, 6, 7, 10] if tiny else LENGTHS,
        methods=ml_collections.FieldReference(None, field_type=list), alphas=[0.4])
    exp.eval.sequences = 20 if tiny else 32
    exp.eval.test_dropout = True  # the reference's evaluation keeps dropout on
    exp.eval.test_positions = "reference"  # randomized runs: randomized test positions
    return exp
