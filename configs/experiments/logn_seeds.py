r"""Su's log-n attention scaling reproduced over three training seeds, set against their spread.

The run of configs/experiments/logn.py (a small RoFormer pretrained at 64 tokens on People's
Daily, 1500 steps) trained with seeds 0, 1 and 2; each is evaluated at 64..1024 tokens with
and without log-n scaling, so a difference can be set against the spread between seeds as
well as against each run's bootstrap interval.

    nice -n 10 python eval.py --config=configs/experiments/logn_seeds.py \
        --out=results/logn_seeds --baseline=as_is

Variant ':tiny' checks the plumbing.
"""

from configs.experiments import logn

SEEDS = (0, 1, 2)


def get_config(arg=None):
    exp = logn.get_config(arg)
    exp.name = "logn_seeds"
    exp.workdir_root = exp.workdir_root.replace("/logn", "/logn_seeds")
    runs = {}
    for seed in SEEDS:
        config = logn.train_config(arg)
        config.seed = seed
        runs[f"roformer64_seed{seed}"] = config
    exp.runs = type(exp.runs)(runs)
    return exp
