"""Every option of an evaluation, declared once: eval.py's flags, the fields of the Request
that posjax.evaluation.driver runs, the fields an experiment config may set, and the settings
a results.json records are all made from OPTIONS. A new option is one line here (and the code
that uses it).

Each Option has a name (the Request field), a kind (how a flag's text is read), a default, the
help text, the flag's name where it differs (`workdir` fills `workdirs`; None: no flag), the
path of its field in an experiment config (`eval.lengths`; None: not settable there), the
results sections whose recorded settings hold it, and a check of its value alone (checks
across options, and those that open a run, are driver.check_request's).

This module imports nothing that starts JAX: eval.py defines its flags from it and refuses
bad input before JAX starts.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from posjax.errors import check

# results sections whose settings record an option: the MLM sweep and its recovery curve
# ('text'), the retrieval and long-document tasks ('tasks', recorded with 'text'), and the
# algorithmic tasks ('algorithmic')
TEXT, ALGORITHMIC, BOTH = ("text",), ("algorithmic",), ("text", "algorithmic")

# how a flag's text is read: a value, a comma-separated list ('ints', 'floats', 'strs'), a
# repeated flag ('paths', 'groups': NAME=W1,W2), or no flag at all ('config')
KINDS = ("str", "int", "float", "bool", "ints", "floats", "strs", "paths", "groups", "config")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _positive_int(v) -> bool:
    return _is_int(v) and v >= 1


def _optional(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or test(v)


@dataclasses.dataclass(frozen=True)
class Option:
    name: str
    kind: str
    default: Any
    doc: str
    flag: Optional[str] = ""  # "" = the name; None = no flag (set by code, not by a user)
    experiment: Optional[str] = None  # its field in an experiment config, e.g. 'eval.lengths'
    recorded: tuple = ()  # the results sections whose settings hold it
    choices: tuple = ()  # a 'str' option's allowed values (a flag enum)
    valid: Optional[Callable[[Any], bool]] = None  # a check of the value alone ...
    allowed: str = ""  # ... and what it allows, for the one-line error

    @property
    def flag_name(self) -> Optional[str]:
        return self.name if self.flag == "" else self.flag


OPTIONS = (
    Option("out", "str", None, "Output directory (results.json, .csv, .md, plots).",
           valid=bool, allowed="an output directory"),
    Option("workdirs", "paths", (), "Training workdir to evaluate (repeatable).",
           flag="workdir"),
    Option("lengths", "ints", None, "Evaluation lengths; default: the training length T, 2T, "
           "4T, ... up to 8192.", experiment="eval.lengths"),
    Option("methods", "strs", None, "Methods: as_is (alias none), truncate, or a scheme's own "
           "(`python -m posjax list methods` prints them all). Default: those of each scheme.",
           experiment="eval.methods", recorded=TEXT),
    Option("baseline", "str", None, "A method of --methods: add each cell's paired "
           "difference from it (same rows, same masks) with its interval.", recorded=TEXT),
    Option("alphas", "floats", (0.2, 0.3, 0.4, 0.45), "Hierarchical alphas.",
           experiment="eval.alphas", recorded=TEXT,
           valid=lambda v: all(isinstance(a, (int, float)) and 0 < a < 1 and a != 0.5
                               for a in v),
           allowed="numbers in (0, 1) other than 0.5 (hierarchical alpha)"),
    Option("logn", "bool", False, "Also run every method with log-n scaling (logn_length = T).",
           experiment="eval.logn", recorded=TEXT),
    Option("masked_tokens", "int", 32768, "Masked tokens of the held-out stream, scored at "
           "every length (fewer if the held-out split is smaller).",
           experiment="eval.masked_tokens", recorded=TEXT, valid=_positive_int,
           allowed="a positive int (masked tokens scored at every length)"),
    Option("seed", "int", 0, "Seed of the masks, the position shuffle and the bootstrap.",
           recorded=BOTH, valid=_is_int, allowed="an int"),
    Option("reliance", "bool", True, "Measure position reliance (as_is with shuffled positions "
           "at the training length)."),
    Option("batch_tokens", "int", 16384, "Tokens per evaluation batch (rows = this // L).",
           experiment="eval.batch_tokens", recorded=BOTH, valid=_positive_int,
           allowed="a positive int (tokens per evaluation batch)"),
    Option("rope_factor", "float", None, "Fixed RoPE scaling factor (default max(1, L/T)).",
           recorded=TEXT, valid=_optional(lambda v: v >= 1),
           allowed="unset (= max(1, L/T) per length) or a number >= 1"),
    Option("rerope_window", "int", None, "ReRoPE window (default T // 2).", recorded=TEXT,
           valid=_optional(_positive_int), allowed="unset (= T//2) or an int >= 1"),
    Option("leaky_factor", "float", None, "Leaky ReRoPE k (default max(2, (L-w)/(T-w))).",
           recorded=TEXT, valid=_optional(lambda v: v > 1),
           allowed="unset (auto) or a number > 1"),
    Option("corpus", "str", None, "Evaluate on another corpus than the run's (peoples_daily, "
           "kjv, text_dir, tfds, synthetic).", recorded=TEXT),
    Option("data_path", "str", None, "data.path for --corpus (e.g. a text dir).",
           recorded=TEXT),
    Option("max_documents", "int", None, "Override data.max_documents (0 = all).",
           recorded=TEXT, valid=_optional(lambda v: _is_int(v) and v >= 0),
           allowed="unset or an int >= 0 (0 = all documents)"),
    Option("recovery_steps", "ints", None, "Recovery curve: continued training at "
           "--continue_length evaluated after these steps, e.g. 0,100,300,1000.",
           experiment="recovery_steps", recorded=TEXT),
    Option("recovery_methods", "strs", None, "Methods to continue training with (default "
           "hierarchical): hierarchical, tile, interpolate, stretch, new_rows, ...; truncate: "
           "the control, the same training at the trained length, read in its windows",
           experiment="recovery_methods", recorded=TEXT),
    Option("continue_steps", "int", 0, "Shorthand for --recovery_steps=0,N.",
           experiment="continue_steps", valid=lambda v: _is_int(v) and v >= 0,
           allowed="an int >= 0 (0 = no continued training)"),
    Option("continue_length", "int", 0, "Length of the continued training.",
           experiment="continue_length", recorded=TEXT),
    Option("continue_alpha", "float", 0.4, "Hierarchical alpha of the continued training.",
           experiment="continue_alpha", recorded=TEXT),
    Option("continue_seeds", "ints", None, "Recovery curve: one continued run per seed (data "
           "order, masks, dropout); default: one run with the source's seed.",
           experiment="continue_seeds", recorded=TEXT),
    Option("continue_schedule", "str", "constant", "Learning rate of the continued training "
           "after its warmup: constant (checkpoints differ in steps only), or the source's "
           "linear decay to 0 at the last step.", experiment="continue_schedule",
           recorded=TEXT, choices=("constant", "linear")),
    Option("continue_batch_size", "int", None, "Rows of --continue_length per continued "
           "step, the same for every method (default: the source's tokens per step).",
           experiment="continue_batch_size", recorded=TEXT),
    Option("cluster_tokens", "int", 0, "Bootstrap clusters: spans of this many held-out tokens "
           "inside each document (0 = one cluster per document).",
           experiment="eval.cluster_tokens", recorded=TEXT),
    Option("tasks", "strs", None, "Evaluate tasks instead of the held-out MLM: passkey, "
           "needle, copy_span (retrieval over a depth grid), longdoc (MLM inside single long "
           "documents); see posjax/evaluation/tasks.", experiment="eval.tasks",
           recorded=("tasks",)),
    Option("task_rows", "int", 20, "Rows per depth of each retrieval task.",
           experiment="eval.task_rows", recorded=("tasks",)),
    Option("task_digits", "int", 5, "Answer tokens (key digits) of each retrieval row.",
           experiment="eval.task_digits", recorded=("tasks",)),
    Option("groups", "groups", None, "NAME=W1,W2,...: these runs (--workdir paths as given or "
           "experiment run names) are the training seeds of one group NAME; by default runs "
           "that differ only in config.seed are grouped.", flag="group"),
    Option("allow_mixed_corpora", "bool", False, "Put runs trained on different corpora or "
           "tokenizers into one table (refused otherwise); titles then say so."),
    Option("sequences", "int", 32, "Algorithmic-task runs: test sequences per length (the same "
           "for every run; the intervals' clusters, at least 20 for a bootstrap).",
           experiment="eval.sequences", recorded=ALGORITHMIC),
    Option("test_dropout", "bool", True, "Algorithmic-task runs: dropout on at evaluation, as "
           "the reference evaluates (--notest_dropout: deterministic).",
           experiment="eval.test_dropout", recorded=ALGORITHMIC),
    Option("test_positions", "str", "reference", "Algorithmic-task runs: 'reference' tests "
           "randomized runs with randomized positions as the reference does; 'plain' uses "
           "0..n-1 for every run.", experiment="eval.test_positions", recorded=ALGORITHMIC,
           choices=("reference", "plain")),
    Option("reuse", "strs", None, "Results folders (eval.py --out) whose cells of the same "
           "weights, step, method, settings and length are taken instead of scored again, "
           "marked 'reused' with their source in results.json."),
    Option("cell_cache", "bool", False, "Also keep every scored cell in, and take cells from, "
           "posjax's user cache ($XDG_CACHE_HOME/posjax/cells, default ~/.cache)."),
    Option("progress", "bool", None, "Show tqdm bars (default: when stderr is a terminal).",
           flag="progress_bar"),
    Option("experiment", "config", None, "An experiment config (configs/experiments/*.py): "
           "its runs are trained, and its fields are the defaults of the options above.",
           flag=None),
)
BY_NAME = {o.name: o for o in OPTIONS}


def default(name: str) -> Any:
    """The option's default (lists as lists: a default is never shared between requests)."""
    value = BY_NAME[name].default
    return list(value) if isinstance(value, tuple) else value


def _field(o: Option):
    if isinstance(o.default, tuple):
        return dataclasses.field(default_factory=lambda d=o.default: list(d),
                                 metadata={"doc": o.doc})
    return dataclasses.field(default=o.default, metadata={"doc": o.doc})


# What eval.py does, as a plain value: driver.run(Request(out=..., workdirs=[...], ...)).
Request = dataclasses.make_dataclass(
    "Request", [(o.name, Any, _field(o)) for o in OPTIONS])
Request.__module__ = __name__  # pickles and reprs name this module
Request.__doc__ = ("An evaluation: " + ", ".join(o.name for o in OPTIONS)
                   + " (posjax.evaluation.run.options.OPTIONS says what each is).")


def check_fields(r) -> None:
    """ConfigError on the first option whose value fails its own check."""
    for o in OPTIONS:
        value = getattr(r, o.name)
        if o.valid is not None:
            check(o.valid(value), o.name, value, o.allowed)
        if o.choices and value is not None:
            check(value in o.choices, o.name, value, f"one of {', '.join(o.choices)}")


def recorded(r, section: str, **computed) -> dict:
    """The settings results.json records for a `section` run ('text', 'tasks',
    'algorithmic'): the options recorded there, as lists where they are lists, then
    `computed` (values the run derives, such as the lengths it chose)."""
    out = {}
    for o in OPTIONS:
        if section in o.recorded:
            value = getattr(r, o.name)
            out[o.name] = list(value) if isinstance(value, (tuple, list)) else value
    return {**out, **computed}


def experiment_value(experiment, name: str, missing=None):
    """The experiment config's value of option `name`, `missing` where it sets none."""
    path = BY_NAME[name].experiment
    if experiment is None or path is None:
        return missing
    node = experiment
    for part in path.split("."):
        if part not in node:
            return missing
        node = node[part]
    return node


def check_experiment(experiment) -> None:
    """ConfigError on a field of an experiment's `eval` block that no option declares (a
    misspelt field would otherwise be ignored, and its default used)."""
    if experiment is None or "eval" not in experiment:
        return
    known = sorted(o.experiment.split(".", 1)[1] for o in OPTIONS
                   if o.experiment and o.experiment.startswith("eval."))
    for key in experiment.eval:
        check(key in known, f"eval.{key}", experiment.eval[key],
              f"a field of {', '.join(known)} (posjax/evaluation/run/options.py)")
