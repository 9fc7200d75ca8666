r"""Length extrapolation: how does each position scheme behave past its training length?

    python eval.py --workdir=workdirs/roformer --out=runs/eval_roformer
    python eval.py --workdir=W1 --workdir=W2 --out=DIR --lengths=512,1024,2048,4096,8192,16384 \
        --methods=as_is,ntk,yarn,rerope --baseline=as_is --logn --batch_tokens=32768
    python eval.py --workdir=workdirs/bert --out=DIR --lengths=512,1536 \
        --methods=as_is,hierarchical,tile,interpolate,stretch,new_rows --alphas=0.4 \
        --recovery_steps=0,100,300,1000 --continue_length=1536 \
        --recovery_methods=hierarchical,tile,interpolate,stretch,new_rows
    python eval.py --config=configs/experiments/logn.py --out=runs/logn

Experiment configs, position schemes and eval methods are listed by `python -m posjax list`.

Each --workdir is a training workdir (config.json, vocab.txt, checkpoints/); only the params of
its latest checkpoint are read, nothing there is written. The sweep is lengths x methods (see
posjax/evaluation/methods.py for what each method means; not_applicable cells are reported with
their reason). Every length scores the SAME masked tokens: one held-out stream per run with one
fixed set of about --masked_tokens masked places, cut into rows of each length
(posjax/data/heldout.py). Every number has a 95% interval over the rows' documents (its
method named in each table: posjax/evaluation/stats/intervals.py);
each run's position reliance (accuracy with intact minus shuffled position ids at the training
length) heads its table; --baseline adds paired differences. --recovery_steps trains each
--recovery_methods at --continue_length and evaluates the checkpoints (recovery.png).
--tasks=passkey,needle,copy_span,longdoc evaluates those tasks over the same lengths and
methods instead (tasks.md / tasks.csv, task_<task>_vs_length.png, heatmap_*.png per run and
method: length x depth), --task_rows rows per depth, seeded by --seed.
Runs trained on the algorithmic tasks (configs/algorithmic.py; configs/experiments/algorithmic.py)
are scored on their own tasks instead: --sequences test sequences per length (the same for
every run), the reference's masked accuracy, its test-time behaviour by default (dropout on,
randomized runs tested with randomized positions: --test_dropout, --test_positions), with
randomized-minus-plain differences paired by seed and sequence (posjax/evaluation/run/algorithmic).
Results go to --out as results.json (written after every cell) / results.csv / results.md and
PNG plots (redrawn as it goes, at most about a tenth of its time, and at its end); a rerun skips the cells already there, and --reuse=DIR,... (or --cell_cache) takes
the cells of the same weights, step, method, settings and length from other results folders
(or posjax's user cache) instead of scoring them again. It prints its plan first (cells to
score, done, not applicable, an estimate), then a line per scored cell with the time left.
An experiment --config trains the runs it names (if not yet trained) and supplies defaults
for every flag not given on the command line.

Runs that differ only in their training seed (config.seed) are one group: every table cell is
the mean over its seeds with an interval over seeds and documents, and says how many seeds it
has (--group=NAME=W1,W2 names a group by hand). Runs trained on different corpora or
tokenizers are refused in one --out unless --allow_mixed_corpora. `python -m
posjax.evaluation.summary DIR` prints a results folder's numbers from its results.json.

Exit codes: 0 done, 2 bad input (one line on stderr, nothing compiled).
"""

import sys

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from posjax import startup
from posjax.config.cli import config_error, fail, parse_flags
from posjax.errors import ConfigError
from posjax.evaluation.run import options

config_flags.DEFINE_config_file(
    "config", None, "Experiment config (configs/experiments/*.py[:variant]): runs to train + "
    "sweep defaults.", lock_config=False)


def _define(o: options.Option) -> None:
    """eval.py's flag for option `o` (lists are read as text, then by _typed)."""
    name, default = o.flag_name, o.default
    if o.kind in ("paths", "groups"):
        flags.DEFINE_multi_string(name, [], o.doc)
    elif o.kind in ("ints", "floats", "strs"):
        flags.DEFINE_list(name, None if default is None else [str(v) for v in default], o.doc)
    elif o.kind == "str" and o.choices:
        flags.DEFINE_enum(name, default, list(o.choices), o.doc)
    else:
        define = {"str": flags.DEFINE_string, "int": flags.DEFINE_integer,
                  "float": flags.DEFINE_float, "bool": flags.DEFINE_bool}[o.kind]
        define(name, default, o.doc)


for _option in options.OPTIONS:
    if _option.flag_name is not None:
        _define(_option)
FLAGS = flags.FLAGS


def _numbers(name, values, kind):
    try:
        return [kind(v) for v in values]
    except (TypeError, ValueError):
        fail(f"--{name}={','.join(str(v) for v in values)} is not allowed: a comma-separated "
             f"list of {'ints' if kind is int else 'numbers'}")


def _groups(specs) -> dict:
    groups = {}
    for spec in specs:
        name, eq, members = spec.partition("=")
        if not (name and eq and members) or name in groups:
            fail(f"--group={spec} is not allowed: NAME=W1,W2,... with a new NAME and at least "
                 "one run (a --workdir as given or an experiment run name)")
        groups[name] = [m for m in members.split(",") if m]
    return groups


def _typed(o: options.Option, value):
    """A flag's or an experiment field's value as the Request holds it."""
    if value is None:
        return None
    if o.kind in ("ints", "floats"):
        return _numbers(o.flag_name, list(value), int if o.kind == "ints" else float)
    if o.kind in ("strs", "paths"):
        return list(value) or (None if o.kind == "strs" else [])
    if o.kind == "groups":
        return _groups(value) or None
    if o.kind in ("float", "bool"):
        return float(value) if o.kind == "float" else bool(value)
    return value


def _value(o: options.Option, experiment):
    """The flag if given on the command line, else the experiment's field, else the default."""
    flag = FLAGS[o.flag_name]
    if flag.present or experiment is None:
        return _typed(o, flag.value)
    return _typed(o, options.experiment_value(experiment, o.name, missing=flag.value))


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments {argv[1:]}")
    if not FLAGS.out:
        fail("--out=DIR is required (where results.json and the plots go)")
    from posjax import storage  # gs:// without its filesystem package: one line, nothing written
    try:
        storage.check_filesystem(FLAGS.out, "out")
        for w in FLAGS.workdir:
            storage.check_filesystem(w)
    except ConfigError as e:
        fail(str(e))
    experiment = None
    if FLAGS.config is not None:
        try:
            experiment = FLAGS.config
            experiment.keys()
        except OSError as e:
            error = config_error(e)
            fail(str(error) if error is not None else e)
        if "runs" not in experiment:
            fail("--config must be an experiment config (configs/experiments/*.py) with 'runs'")
    absl_logging.set_verbosity(absl_logging.ERROR)  # orbax is chatty at INFO/WARNING

    values = {o.name: _value(o, experiment) for o in options.OPTIONS
              if o.flag_name is not None}
    progress = values.pop("progress")
    values.update(experiment=experiment,
                  progress=progress if progress is not None else sys.stderr.isatty())
    done_before = {s: _finished_keys(FLAGS.out, s) for s in ("tasks", "cells", "algorithmic")}

    from posjax.evaluation import driver  # JAX starts here, after the flags are known
    from posjax import compilation_cache
    compilation_cache.enable()  # a rerun reuses the compiled programs: posjax/compilation_cache.py

    request = driver.Request(**values)
    from posjax.evaluation.run.continued import Stopped

    try:
        results = driver.run(request)
    except ConfigError as e:
        fail(str(e))
    except Stopped as e:  # a clean stop, as train.py's: exit 0, rerun to resume
        print(e, flush=True)
        return
    section_name = ("algorithmic" if "algorithmic" in results else "tasks" if request.tasks
                    else "cells")
    section = results[section_name]
    ok = {k for k, c in section.items() if c["status"] == "ok"}
    n_na = sum(c["status"] == "not_applicable" for c in section.values())
    done = done_before[section_name]
    reused = {k for k in ok - done if section[k].get("reused")}
    print(f"eval: {len(ok - done - reused)} cells evaluated, {len(ok & done)} already done, "
          + (f"{len(reused)} reused, " if reused else "")
          + f"{n_na} not applicable; results in {FLAGS.out}", flush=True)


def _finished_keys(out: str, section: str) -> set:
    """Keys of the cells (or task cells) that out/results.json already holds: a rerun skips
    them, and the closing line counts them apart from the cells this run evaluated."""
    from posjax.evaluation.results import results_file  # JAX-free: read before JAX starts

    try:
        return set(results_file.section(results_file.load(out), section))
    except (results_file.ResultsFileError, KeyError, TypeError):  # none yet, or unreadable:
        # driver.run reports why
        return set()


if __name__ == "__main__":
    startup.start()  # before jax allocates: see posjax/startup.py
    app.run(main, flags_parser=parse_flags)
