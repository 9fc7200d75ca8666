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
method named in each table: posjax/evaluation/intervals.py);
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
randomized-minus-plain differences paired by seed and sequence (posjax/evaluation/algorithmic).
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

import json
import sys

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from posjax import startup
from posjax.cli import config_error, fail, parse_flags
from posjax.errors import ConfigError

config_flags.DEFINE_config_file(
    "config", None, "Experiment config (configs/experiments/*.py[:variant]): runs to train + "
    "sweep defaults.", lock_config=False)
flags.DEFINE_multi_string("workdir", [], "Training workdir to evaluate (repeatable).")
flags.DEFINE_string("out", None, "Output directory (results.json, .csv, .md, plots).")
flags.DEFINE_list("lengths", None, "Evaluation lengths; default: the training length T, 2T, "
                  "4T, ... up to 8192.")
flags.DEFINE_list("methods", None, "Methods: as_is (alias none), truncate, or a scheme's own "
                  "(`python -m posjax list methods` prints them all). Default: those of each "
                  "scheme.")
flags.DEFINE_string("baseline", None, "A method of --methods: add each cell's paired difference "
                    "from it (same rows, same masks) with its interval.")
flags.DEFINE_list("alphas", ["0.2", "0.3", "0.4", "0.45"], "Hierarchical alphas.")
flags.DEFINE_bool("logn", False, "Also run every method with log-n scaling (logn_length = T).")
flags.DEFINE_integer("masked_tokens", 32768, "Masked tokens of the held-out stream, scored at "
                     "every length (fewer if the held-out split is smaller).")
flags.DEFINE_integer("seed", 0, "Seed of the masks, the position shuffle and the bootstrap.")
flags.DEFINE_bool("reliance", True, "Measure position reliance (as_is with shuffled positions "
                  "at the training length).")
flags.DEFINE_integer("batch_tokens", 16384, "Tokens per evaluation batch (rows = this // L).")
flags.DEFINE_float("rope_factor", None, "Fixed RoPE scaling factor (default max(1, L/T)).")
flags.DEFINE_integer("rerope_window", None, "ReRoPE window (default T // 2).")
flags.DEFINE_float("leaky_factor", None, "Leaky ReRoPE k (default max(2, (L-w)/(T-w))).")
flags.DEFINE_string("corpus", None, "Evaluate on another corpus than the run's "
                    "(peoples_daily, kjv, text_dir, tfds, synthetic).")
flags.DEFINE_string("data_path", None, "data.path for --corpus (e.g. a text dir).")
flags.DEFINE_integer("max_documents", None, "Override data.max_documents (0 = all).")
flags.DEFINE_list("recovery_steps", None, "Recovery curve: continued training at "
                  "--continue_length evaluated after these steps, e.g. 0,100,300,1000.")
flags.DEFINE_list("recovery_methods", None, "Methods to continue training with (default "
                  "hierarchical): hierarchical, tile, interpolate, stretch, new_rows, ...")
flags.DEFINE_integer("continue_steps", 0, "Shorthand for --recovery_steps=0,N.")
flags.DEFINE_integer("continue_length", 0, "Length of the continued training.")
flags.DEFINE_float("continue_alpha", 0.4, "Hierarchical alpha of the continued training.")
flags.DEFINE_list("continue_seeds", None, "Recovery curve: one continued run per seed (data "
                  "order, masks, dropout); default: one run with the source's seed.")
flags.DEFINE_enum("continue_schedule", "constant", ["constant", "linear"], "Learning rate of "
                  "the continued training after its warmup: constant (checkpoints differ in "
                  "steps only), or the source's linear decay to 0 at the last step.")
flags.DEFINE_integer("continue_batch_size", None, "Rows of --continue_length per continued "
                     "step, the same for every method (default: the source's tokens per step).")
flags.DEFINE_integer("cluster_tokens", 0, "Bootstrap clusters: spans of this many held-out "
                     "tokens inside each document (0 = one cluster per document).")
flags.DEFINE_list("tasks", None, "Evaluate tasks instead of the held-out MLM: passkey, needle, "
                  "copy_span (retrieval over a depth grid), longdoc (MLM inside single long "
                  "documents); see posjax/evaluation/tasks.")
flags.DEFINE_integer("task_rows", 20, "Rows per depth of each retrieval task.")
flags.DEFINE_integer("task_digits", 5, "Answer tokens (key digits) of each retrieval row.")
flags.DEFINE_multi_string("group", [], "NAME=W1,W2,...: these runs (--workdir paths as given or "
                          "experiment run names) are the training seeds of one group NAME; by "
                          "default runs that differ only in config.seed are grouped.")
flags.DEFINE_bool("allow_mixed_corpora", False, "Put runs trained on different corpora or "
                  "tokenizers into one table (refused otherwise); titles then say so.")
flags.DEFINE_integer("sequences", 32, "Algorithmic-task runs: test sequences per length (the "
                     "same for every run; the intervals' clusters).")
flags.DEFINE_bool("test_dropout", True, "Algorithmic-task runs: dropout on at evaluation, as "
                  "the reference evaluates (--notest_dropout: deterministic).")
flags.DEFINE_enum("test_positions", "reference", ["reference", "plain"], "Algorithmic-task "
                  "runs: 'reference' tests randomized runs with randomized positions as the "
                  "reference does; 'plain' uses 0..n-1 for every run.")
flags.DEFINE_list("reuse", None, "Results folders (eval.py --out) whose cells of the same "
                  "weights, step, method, settings and length are taken instead of scored "
                  "again, marked 'reused' with their source in results.json.")
flags.DEFINE_bool("cell_cache", False, "Also keep every scored cell in, and take cells from, "
                  "posjax's user cache ($XDG_CACHE_HOME/posjax/cells, default ~/.cache).")
flags.DEFINE_bool("progress_bar", None, "Show tqdm bars (default: when stderr is a terminal).")
FLAGS = flags.FLAGS

# flag -> field of the experiment config's `eval` block (or of the experiment itself)
EXPERIMENT_FIELDS = {"lengths": "eval.lengths", "methods": "eval.methods", "alphas": "eval.alphas",
                     "logn": "eval.logn", "masked_tokens": "eval.masked_tokens",
                     "batch_tokens": "eval.batch_tokens", "continue_steps": "continue_steps",
                     "continue_length": "continue_length", "continue_alpha": "continue_alpha",
                     "recovery_steps": "recovery_steps", "recovery_methods": "recovery_methods",
                     "continue_seeds": "continue_seeds", "continue_schedule": "continue_schedule",
                     "continue_batch_size": "continue_batch_size",
                     "cluster_tokens": "eval.cluster_tokens",
                     "tasks": "eval.tasks", "task_rows": "eval.task_rows",
                     "task_digits": "eval.task_digits", "sequences": "eval.sequences",
                     "test_dropout": "eval.test_dropout",
                     "test_positions": "eval.test_positions"}



def _numbers(name, values, kind):
    try:
        return [kind(v) for v in values]
    except ValueError:
        fail(f"--{name}={','.join(values)} is not allowed: a comma-separated list of "
             f"{'ints' if kind is int else 'numbers'}")


def _value(name, experiment):
    """The flag if given on the command line, else the experiment's field, else the default."""
    if FLAGS[name].present or experiment is None:
        return FLAGS[name].value
    node = experiment
    for part in EXPERIMENT_FIELDS.get(name, name).split("."):
        if part not in node:
            return FLAGS[name].value
        node = node[part]
    return node


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

    lengths = _value("lengths", experiment)
    if lengths is not None and FLAGS["lengths"].present:
        lengths = _numbers("lengths", lengths, int)
    alphas = _value("alphas", experiment)
    alphas = _numbers("alphas", alphas, float) if FLAGS["alphas"].present or experiment is None \
        else [float(a) for a in alphas]
    methods = _value("methods", experiment)
    recovery_steps = _value("recovery_steps", experiment)
    continue_seeds = _value("continue_seeds", experiment)
    tasks = _value("tasks", experiment)
    tasks = list(tasks) if tasks else None
    if recovery_steps is not None:
        recovery_steps = _numbers("recovery_steps", [str(s) for s in recovery_steps], int)
    if continue_seeds is not None:
        continue_seeds = _numbers("continue_seeds", [str(s) for s in continue_seeds], int)
    recovery_methods = _value("recovery_methods", experiment)

    progress = FLAGS.progress_bar if FLAGS.progress_bar is not None else sys.stderr.isatty()
    done_before = {s: _finished_keys(FLAGS.out, s) for s in ("tasks", "cells", "algorithmic")}
    groups = {}
    for spec in FLAGS.group:
        name, eq, members = spec.partition("=")
        if not (name and eq and members) or name in groups:
            fail(f"--group={spec} is not allowed: NAME=W1,W2,... with a new NAME and at least "
                 "one run (a --workdir as given or an experiment run name)")
        groups[name] = [m for m in members.split(",") if m]

    from posjax.evaluation import driver  # JAX starts here, after the flags are known
    from posjax import compilation_cache
    compilation_cache.enable()  # a rerun reuses the compiled programs: posjax/compilation_cache.py

    request = driver.Request(
        out=FLAGS.out, workdirs=list(FLAGS.workdir),
        lengths=list(lengths) if lengths is not None else None,
        methods=list(methods) if methods is not None else None, alphas=tuple(alphas),
        logn=bool(_value("logn", experiment)),
        masked_tokens=_value("masked_tokens", experiment), seed=FLAGS.seed,
        baseline=FLAGS.baseline, reliance=FLAGS.reliance, recovery_steps=recovery_steps,
        recovery_methods=list(recovery_methods) if recovery_methods else None,
        continue_seeds=continue_seeds,
        continue_schedule=_value("continue_schedule", experiment),
        continue_batch_size=_value("continue_batch_size", experiment),
        cluster_tokens=_value("cluster_tokens", experiment),
        batch_tokens=_value("batch_tokens", experiment),
        rope_factor=FLAGS.rope_factor, rerope_window=FLAGS.rerope_window,
        leaky_factor=FLAGS.leaky_factor, corpus=FLAGS.corpus, data_path=FLAGS.data_path,
        max_documents=FLAGS.max_documents, continue_steps=_value("continue_steps", experiment),
        continue_length=_value("continue_length", experiment),
        continue_alpha=float(_value("continue_alpha", experiment)),
        experiment=experiment, progress=progress, tasks=tasks,
        task_rows=_value("task_rows", experiment), task_digits=_value("task_digits", experiment),
        allow_mixed_corpora=FLAGS.allow_mixed_corpora, groups=groups or None,
        sequences=_value("sequences", experiment), test_dropout=_value("test_dropout", experiment),
        test_positions=_value("test_positions", experiment),
        reuse=list(FLAGS.reuse) if FLAGS.reuse else None, cell_cache=FLAGS.cell_cache)
    from posjax.evaluation.continued import Stopped

    try:
        results = driver.run(request)
    except ConfigError as e:
        fail(str(e))
    except Stopped as e:  # a clean stop, as train.py's: exit 0, rerun to resume
        print(e, flush=True)
        return
    section_name = ("algorithmic" if "algorithmic" in results else "tasks" if tasks
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
    from posjax import storage
    from posjax.evaluation import report

    path = storage.join(out, report.RESULTS)
    try:
        if not storage.exists(path):
            return set()
        results = json.loads(storage.read_bytes(path).decode("utf-8"))
        return set(report.relative_keys(results, out).get(section, {}))
    except (OSError, ValueError, AttributeError, TypeError):  # unreadable: eval.py reports it
        return set()


if __name__ == "__main__":
    startup.start()  # before jax allocates: see posjax/startup.py
    app.run(main, flags_parser=parse_flags)
