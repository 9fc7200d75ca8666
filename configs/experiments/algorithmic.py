r"""The algorithmic length-generalization grid of Delétang et al. (ICLR 2023) and Ruoss et al.
(ACL 2023): tasks x the papers' encodings x {plain, randomized positions} x 3 training seeds,
each run configs/algorithmic.py's reference setup (5 x 64, batch 128, inputs 1..40).

    nice -n 10 python eval.py --config=configs/experiments/algorithmic.py:core \
        --out=results/algorithmic

trains every run without a finished checkpoint, then scores each (posjax.evaluation.
run.algorithmic: resumable, one run at a time) at every training length 1..40 and at the test
lengths 41, 50, ..., 500 (every 9th, both ends in: 52 of the reference's 460, so the grid's
evaluation stays a small part of its training on a CPU), 32 test sequences per length (the
same for every run; the intervals' clusters), with the reference's test-time behaviour:
dropout on, and randomized runs tested with randomized positions (eval.py --test_dropout,
--test_positions change it).

Variants: 'probe' = which tasks are learned at all: seed 0 of plain RoPE on all 8 tasks (8
runs, scored like the rest; their 'train' score is the accuracy at the lengths 1..40), and
'probe,<task>,...' its runs of those tasks only (one results folder: a session trains the
tasks it most needs first); 'core'
= the core grid, 3 tasks x {rope, xl} x {plain, randomized} x 3 seeds (36 runs); None = the
whole grid, the core plus the papers' other encodings (alibi, sinusoidal, none, learned) and
5 more tasks (264 runs); 'others' = posjax's other schemes on the core tasks (OTHER_SCHEMES,
plain and randomized, 3 seeds). All share one workdir root, so a run another variant trained is
reused (the probe's runs are the grid's '<task>_rope'). 'tiny' = the plumbing (2 runs, the
tiny model, first seed). Run names are '<task>_<scheme>' and '<task>_<scheme>_randomized'
(plus '_seed<s>'). Randomization is left out for POSITION_FREE schemes (no positions
to randomize).

Which tasks make the core. A model that has not learned a task at its training lengths says
nothing about length, and at this budget most tasks are not learned: posjax's seed-0 runs at
posjax's old init (commit aec5d1b's results.json) reached 0.66-0.82 at the training lengths on
duplicate_string and binary_addition after 5,000 steps, and the reference code itself learns
duplicate_string no faster (bench/algorithmic_reference.py: 0.668 after 1,500 steps, posjax
0.653). So the probe runs first, and CORE_TASKS holds the tasks whose probe run scores at
least LEARNED at the training lengths (results/algorithmic: which were left out, and why).
At GRID_STEPS (2026-12-07): reverse_string 1.000, bucket_sort 0.999, stack_manipulation 0.956;
odds_first 0.669 and parity_check 0.512 (chance) are not learned.

Budget (wall seconds of the curriculum's mean training step, bench/algorithmic_step.py,
reverse_string, randomized; 2 cores, idle): Intel Xeon with AMX (2026-12-07) RoPE 0.131, XL
0.235; AMD EPYC Zen 4 (2026-12-08) RoPE 0.166, XL 0.321 (XL ~1.8-1.9x: its factored term makes
the kernel's keys 8 + 64 wide); duplicate_string's tapes
(3L places) ~1.5-2x those. A 5,000-step run alone on 2 cores: RoPE ~11 min, XL ~20 min, plus
its scoring (1-2 min: bucket_sort's 92 cells took 61 s for randomized RoPE, 90 s for XL,
beside the other grid job); two grid jobs side by side take ~1.6x each. The core's
36 runs at the reference code's 10,000 steps would be ~20 wall-hours of training; at
GRID_STEPS = 5,000 ~10 h (the probe ~1.5 h more): steps are cut before seeds. The learning
rate is constant, so a run resumed with more steps is the longer run.
"""

import ml_collections

from configs import algorithmic
from configs.experiments.common import SEEDS, experiment
from posjax.errors import ConfigError

TASKS = ("reverse_string", "duplicate_string", "binary_addition", "missing_duplicate_string",
         "odds_first", "bucket_sort", "stack_manipulation", "parity_check")
# the tasks the probe found learned (docstring; results/algorithmic/README.md)
CORE_TASKS = ("reverse_string", "stack_manipulation", "bucket_sort")
LEARNED = 0.9  # accuracy at the training lengths 1..40 that counts a task as learned
CORE_SCHEMES = ("rope", "xl")  # RoPE and relative (Transformer-XL), the papers' 'relative'
SCHEMES = CORE_SCHEMES + ("alibi", "sinusoidal", "none", "learned")
# posjax's other schemes of 1-D positions, on the core tasks (':others'): the relative biases
# and gates the papers did not run, then the 2024-2025 schemes
OTHER_SCHEMES = ("t5", "nezha", "shaw", "fire", "kerple", "fox", "cope", "dape",
                 "stick_breaking", "ssmax", "hope", "fope", "resonance", "path")
# read no position index (FoX, CoPE and stick-breaking see only the order of the keys, which
# randomized positions keep): their randomized twin would be the same model, so none is run
POSITION_FREE = ("none", "fox", "cope", "stick_breaking")
GRID_STEPS = 5_000  # the reference code's 10,000 halved to fit the budget (docstring)
TEST_LENGTHS = list(range(41, 501, 9))  # 41, 50, ..., 500
LENGTHS = list(range(1, 41)) + TEST_LENGTHS  # the training lengths too: learned at all?


def _runs(tasks, schemes, tiny: bool) -> dict:
    runs = {}
    for task in tasks:
        for scheme in schemes:
            for randomized in (False, True):
                if randomized and scheme in POSITION_FREE:
                    continue
                arg = ",".join([task, scheme] + (["randomized"] if randomized else [])
                               + (["tiny"] if tiny else []))
                name = f"{task}_{scheme}" + ("_randomized" if randomized else "")
                runs[name] = algorithmic.get_config(arg)
                if not tiny:
                    runs[name].train.steps = GRID_STEPS
    return runs


def get_config(arg=None):
    tiny = arg == "tiny"
    if tiny:
        runs = _runs(CORE_TASKS[:1], CORE_SCHEMES[:1], tiny=True)
    elif arg == "probe" or (arg or "").startswith("probe,"):
        tasks = arg.split(",")[1:] or TASKS
        for task in tasks:
            if task not in TASKS:
                raise ConfigError("config variant", arg, f"'probe' or 'probe,<task>,...' with "
                                  f"tasks among {', '.join(TASKS)}")
        runs = {name: run for name, run in _runs(tasks, ("rope",), tiny=False).items()
                if not name.endswith("_randomized")}
    elif arg == "core":
        runs = _runs(CORE_TASKS, CORE_SCHEMES, tiny=False)
    elif arg == "others":
        runs = _runs(CORE_TASKS, OTHER_SCHEMES, tiny=False)
    elif arg is None or arg == "":
        runs = _runs(CORE_TASKS, CORE_SCHEMES, tiny=False)
        runs.update(_runs(CORE_TASKS, SCHEMES[2:], tiny=False))
        runs.update(_runs([t for t in TASKS if t not in CORE_TASKS], SCHEMES, tiny=False))
    else:
        raise ConfigError("config variant", arg, "none, 'probe', 'probe,<task>,...', 'core', "
                          "'others' or 'tiny'")
    exp = experiment(
        "algorithmic", runs, arg, lengths=[3, 6, 7, 10] if tiny else LENGTHS,
        methods=ml_collections.FieldReference(None, field_type=list), alphas=[0.4],
        seeds=SEEDS[:1] if (arg or "").startswith("probe") else SEEDS)
    exp.eval.sequences = 20 if tiny else 32
    exp.eval.test_dropout = True  # the reference's evaluation keeps dropout on
    exp.eval.test_positions = "reference"  # randomized runs: randomized test positions
    return exp
