"""The shape of results.json, declared once: one TypedDict per part of the record.

Read and written only through posjax.evaluation.results.results_file (load -> Results,
save <- Results), which checks a record against these declarations
(posjax.evaluation.results.record_check): a missing required field, or a field of the wrong
type, is one error naming the field.

Why TypedDicts and not dataclasses: the record IS the JSON. Its writers (the sweeps, the
seed and algorithmic derive steps) fill it in place, cell by cell, and the file is rewritten
after every cell; per-row sums are long plain lists. A TypedDict types that dict without a
conversion on every read or write, so a file read and written back is the same bytes, and a
type checker still sees every field by name.

Reading rules (the point of declaring the shape once):
  - a required field is read as `x["name"]`, never with a fallback;
  - a field declared in a `total=False` class (optional: older writers, or only some kinds of
    cell, leave it out) is read as `x.get("name")`: None means absent, nothing else; no
    reader passes its own default;
  - an optional top-level section is read with results_file.section(results, name), which
    is {} when the file has none (declared there, once).
A part with optional fields is a pair of classes: `_Name` holds the required fields and
`Name(_Name, total=False)` adds the optional ones. A union of cells is told apart by its
`status` literal.

The records named in OPEN accept fields not declared here (a run's config, a method's resolved
settings, the recorded eval settings: their fields belong to the config schema and the
evaluator's options); every other record declares all of its fields, and the round-trip test
(tests/evaluation/test_results_record.py) fails on a committed file with a field that is not.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, TypedDict, Union

# ---------------------------------------------------------------- pieces shared by sections


class Interval(TypedDict):
    """A 95% interval of accuracy and of loss, each naming its method (posjax.evaluation.
    stats.intervals); `interval` is the headline (accuracy's). lo/hi are NaN where no interval
    exists (one cluster, nothing scored)."""
    accuracy: float
    accuracy_lo: float
    accuracy_hi: float
    accuracy_interval: str
    loss: float
    loss_lo: float
    loss_hi: float
    loss_interval: str
    interval: str
    clusters: int


class PerSeed(TypedDict):
    """One number per seed, in the order of `seeds`."""
    accuracy: list[float]
    loss: list[float]


class OverSeeds(Interval):
    """An interval over training seeds (intervals.summarize_seeds / paired_seeds)."""
    n_seeds: int
    seeds: list[int]
    per_seed: PerSeed


class Rows(TypedDict):
    """Per-row sums, one entry per row (per test sequence for the algorithmic benchmark):
    what every interval is computed from. Checked as lists, not number by number."""
    loss: list[float]
    correct: list[int]
    count: list[int]
    cluster: list[int]


class _Bucket(TypedDict):
    """The tokens of one position range of a cell ('0-512'); no interval (no per-row split).
    loss and accuracy are None where the bucket scored nothing."""
    bucket: str
    start: int
    end: int
    count: int
    correct: int
    loss_sum: float
    loss: Optional[float]
    accuracy: Optional[float]


class Bucket(_Bucket, total=False):
    perplexity: Optional[float]  # causal models only


# ------------------------------------------------------------------ head, settings, runs


class Versions(TypedDict):
    python: str
    jax: str
    flax: str
    numpy: str
    backend: str
    posjax_commit: Optional[str]


class Settings(TypedDict, total=False):
    """The request the evaluator ran: the options posjax.evaluation.run.options marks as recorded
    for the run's kind (text, tasks, algorithmic), then what the run computed (lengths,
    experiment). OPEN: those options are declared there, once, not restated here; every kind
    records `seed`, but a record made by hand (tests, scripts) may hold none. The fields
    below are the ones the readers use, each read as settings.get(name)."""
    seed: int
    lengths: list[int]
    experiment: Optional[str]
    baseline: Optional[str]
    masked_tokens: int
    corpus: Optional[str]
    mixed_corpora: Optional[Any]
    groups: Optional[dict[str, list[str]]]  # eval.py --group: {name: [run keys]}
    sequences: int           # algorithmic
    test_dropout: bool       # algorithmic
    test_positions: str      # algorithmic


class _Run(TypedDict):
    """runs["<workdir>@<step>"]: one checkpoint (workdir relative to the results folder)."""
    name: str
    workdir: str
    step: int
    scheme: str
    trained_length: int
    causal: bool
    config: dict[str, Any]


class Run(_Run, total=False):
    weights: str  # the digest of the checkpoint's weights (posjax.evaluation.run.reuse)


class Params(TypedDict, total=False):
    """A variant's method parameters (OPEN: each method names its own)."""
    alpha: float
    logn: bool
    shuffle_positions: bool


# ------------------------------------------------------------------------ MLM cells


class _CellOverall(TypedDict):
    """A cell's pooled numbers and their intervals (metrics + intervals.summarize)."""
    count: int
    correct: int
    loss_sum: float
    accuracy: Optional[float]
    accuracy_lo: float
    accuracy_hi: float
    loss: Optional[float]
    loss_lo: float
    loss_hi: float
    rows: int
    clusters: int
    resampled: str  # what the interval resamples: 'documents', 'rows', ...


class CellOverall(_CellOverall, total=False):
    perplexity: Optional[float]  # causal models only
    # absent in cells recorded before cells named their interval (the cell's own
    # `interval` says so); nothing reads them from a cell
    interval: str
    accuracy_interval: str
    loss_interval: str
    n_seeds: int
    seeds: list[int]


class _CellHead(TypedDict):
    """What every MLM cell records, evaluated or not."""
    run: str
    workdir: str
    step: int
    scheme: str
    trained_length: int
    causal: bool
    method: str
    label: str
    params: Params
    length: int
    seed: int


class CellHead(_CellHead, total=False):
    continue_seed: int  # a continued-training run's seed (posjax.evaluation.run.continued)
    details: dict[str, Any]  # the method's resolved settings (OPEN)


class Scored(TypedDict):
    """What an evaluated cell records beside its numbers; its seed cell copies them from the
    group's first seed (posjax.evaluation.derive.seeds), so a field here is in both."""
    crossing_rows: int
    n_seeds: int
    seeds: list[int]
    interval: str
    wall_s: float
    first_batch_s: Optional[float]
    rows_per_batch: int


class _OkCell(CellHead, Scored):
    status: Literal["ok"]
    overall: CellOverall
    rows: Rows
    buckets: list[Bucket]


class OkCell(_OkCell, total=False):
    cell_s: float  # the cell's whole time, scoring and writing (run.sweep; the ETA reads it)


class NotApplicableCell(CellHead):
    status: Literal["not_applicable"]
    reason: str


Cell = Union[OkCell, NotApplicableCell]


class SeedOverall(OverSeeds):
    """A seed cell's numbers: the mean over its group's seeds (summarize_seeds)."""
    count: int
    rows: int
    resampled: str


class _SeedCellHead(CellHead):
    """A seed cell: the first seed's cell without its rows, for the whole group."""
    group: str
    runs: list[str]
    n_seeds: int
    seeds: list[int]


class _OkSeedCell(_SeedCellHead, Scored):
    status: Literal["ok"]
    overall: SeedOverall


class OkSeedCell(_OkSeedCell, total=False):
    buckets: list[Bucket]  # a 1-seed group only (buckets are not averaged over seeds)
    cell_s: float  # the first seed's cell's (OkCell)


class _NotApplicableSeedCell(_SeedCellHead):
    status: Literal["not_applicable"]
    reason: str


class NotApplicableSeedCell(_NotApplicableSeedCell, total=False):
    interval: None


SeedCell = Union[OkSeedCell, NotApplicableSeedCell]


class Group(TypedDict):
    """groups[key]: runs that differ only in their training seed
    (posjax.evaluation.derive.seeds)."""
    name: str
    runs: list[str]
    seeds: list[int]
    fingerprint: str


class _Difference(OverSeeds):
    """A minus b, paired by seed and token. kind 'baseline' (b: the --baseline method),
    'methods' (two variants of one group) or 'runs' (one variant, two groups)."""
    kind: Literal["baseline", "methods", "runs"]
    a: str
    b: str
    a_label: str
    b_label: str
    a_run: str
    b_run: str
    length: int
    resampled: str
    identical: bool  # every token scored alike: exactly 0, no interval


class Difference(_Difference, total=False):
    baseline: str  # kind 'baseline' only: b's label


class Reliance(OverSeeds):
    """Accuracy intact minus shuffled positions at the training length."""
    run: str
    length: int
    intact: float
    shuffled: float
    resampled: str
    identical: bool


class _Curve(TypedDict):
    """recovery[key]: continued training's cells by step (posjax.evaluation.run.recovery)."""
    source: str
    label: str
    length: int
    cells: dict[str, str]  # {step: cell key}
    schedule: str  # results_file's migration: 'linear' in curves recorded before it


class Curve(_Curve, total=False):
    # absent in curves recorded before the seed was an option (the two come together)
    seed: int
    tokens_per_step: int


# ------------------------------------------------------------------------- task cells


class _RetrievalOverall(TypedDict):
    """A retrieval task's numbers (tasks.scoring.summary / seeds.task_summary)."""
    count: int
    rows: int
    exact: float
    exact_lo: float
    exact_hi: float
    digit_accuracy: float
    digit_accuracy_lo: float
    digit_accuracy_hi: float
    digit_accuracy_interval: str
    interval: str


class RetrievalOverall(_RetrievalOverall, total=False):
    loss: float       # one run's cell (not averaged over seeds)
    loss_lo: float
    loss_hi: float
    n_seeds: int      # a seed group's cell
    seeds: list[int]


class RetrievalDepth(RetrievalOverall):
    depth: float


class _LongdocOverall(TypedDict):
    """longdoc: MLM inside one long document (tasks.longdoc)."""
    accuracy: float
    accuracy_lo: float
    accuracy_hi: float
    loss: float
    loss_lo: float
    loss_hi: float
    rows: int
    clusters: int
    resampled: str
    interval: str


class LongdocOverall(_LongdocOverall, total=False):
    count: int
    n_seeds: int
    seeds: list[int]
    per_seed: PerSeed
    accuracy_interval: str
    loss_interval: str


TaskOverall = Union[RetrievalOverall, LongdocOverall]


class _TaskRows(TypedDict):
    correct: list[int]
    count: list[int]


class TaskRows(_TaskRows, total=False):
    loss: list[float]      # absent in cells recorded before tasks kept their loss
    depth: list[float]     # retrieval tasks
    distance: list[int]
    cluster: list[int]     # longdoc


class _TaskHead(CellHead):
    task: str


class _OkTaskCell(_TaskHead):
    status: Literal["ok"]
    overall: TaskOverall
    rows: TaskRows
    wall_s: float
    rows_per_batch: int
    # results_file's migration fills these three in a file recorded before them
    n_seeds: int
    seeds: list[int]
    interval: str


class OkTaskCell(_OkTaskCell, total=False):
    depths: list[RetrievalDepth]  # retrieval tasks
    digits: int
    first_batch_s: Optional[float]
    buckets: list[Bucket]         # longdoc
    dropped_rows: int             # longdoc


class NotApplicableTaskCell(_TaskHead):
    status: Literal["not_applicable"]
    reason: str

TaskCell = Union[OkTaskCell, NotApplicableTaskCell]


class _OkTaskSeedCell(_TaskHead):
    """A seed group's task cell: the first seed's cell without rows, overall the mean."""
    status: Literal["ok"]
    overall: TaskOverall
    wall_s: float
    rows_per_batch: int
    group: str
    n_seeds: int
    seeds: list[int]
    interval: str


class OkTaskSeedCell(_OkTaskSeedCell, total=False):
    depths: list[RetrievalDepth]
    digits: int
    first_batch_s: Optional[float]
    buckets: list[Bucket]
    dropped_rows: int


class NotApplicableTaskSeedCell(NotApplicableTaskCell):
    group: str
    n_seeds: int
    seeds: list[int]

TaskSeedCell = Union[OkTaskSeedCell, NotApplicableTaskSeedCell]

# -------------------------------------------------------------- the algorithmic benchmark


class _AlgorithmicHead(TypedDict):
    """What every algorithmic cell and seed cell records (posjax.evaluation.run.algorithmic)."""
    scheme: str
    task: str
    randomized: bool
    test_positions: str
    dropout: bool
    length: int
    trained_max_input: int
    sequences: int
    step: int
    run: str


class _AlgorithmicCellHead(_AlgorithmicHead):
    workdir: str
    seed: int


class AlgorithmicSummary(Interval):
    """One run's numbers at one length (intervals.summarize)."""
    count: int
    rows: int
    resampled: str
    n_seeds: int
    seeds: list[int]


class _OkAlgorithmicCell(_AlgorithmicCellHead):
    status: Literal["ok"]
    rows: Rows
    overall: AlgorithmicSummary
    n_seeds: int
    seeds: list[int]
    interval: str
    places: int
    padded: int
    rows_per_batch: int
    wall_s: float
    first_batch_s: Optional[float]


class OkAlgorithmicCell(_OkAlgorithmicCell, total=False):
    cell_s: float


class NotApplicableAlgorithmicCell(_AlgorithmicCellHead):
    status: Literal["not_applicable"]
    reason: str

AlgorithmicCell = Union[OkAlgorithmicCell, NotApplicableAlgorithmicCell]


class _AlgorithmicSeedHead(_AlgorithmicHead):
    group: str
    settings: str  # the settings hash of the cells' keys
    runs: list[str]
    n_seeds: int
    seeds: list[int]


class OkAlgorithmicSeedCell(_AlgorithmicSeedHead):
    status: Literal["ok"]
    overall: SeedOverall
    interval: str


class NotApplicableAlgorithmicSeedCell(_AlgorithmicSeedHead):
    status: Literal["not_applicable"]
    reason: str
    interval: None

AlgorithmicSeedCell = Union[OkAlgorithmicSeedCell, NotApplicableAlgorithmicSeedCell]


class AlgorithmicScore(OverSeeds):
    """The mean over the lengths of `range` ('test': longer than trained; 'train')."""
    run: str
    group: str
    scheme: str
    task: str
    randomized: bool
    test_positions: str
    dropout: bool
    trained_max_input: int
    sequences: int
    settings: str
    range: Literal["test", "train"]
    lengths: list[int]


class _AlgorithmicDifference(OverSeeds):
    """Randomized minus plain: per length (kind 'length') or over a range (kind 'range')."""
    kind: Literal["length", "range"]
    a_run: str
    b_run: str
    a_group: str
    b_group: str
    task: str
    scheme: str
    settings: str
    range: Literal["test", "train"]


class AlgorithmicDifference(_AlgorithmicDifference, total=False):
    length: int        # kind 'length'
    resampled: str
    identical: bool
    lengths: list[int]  # kind 'range'


class AlgorithmicAverage(OverSeeds):
    """A range difference averaged over the tasks that have both runs."""
    scheme: str
    settings: str
    range: Literal["test", "train"]
    tasks: list[str]


# ------------------------------------------------------------------------- the record


class _Results(TypedDict):
    """results.json. `cells` and `runs` always; the rest by what was evaluated and derived."""
    schema: str
    created: str
    versions: Versions
    settings: Settings
    runs: dict[str, Run]
    cells: dict[str, Cell]


class Results(_Results, total=False):
    updated: str
    # derived from the cells (posjax.evaluation.derive; absent in a file written mid-sweep)
    groups: dict[str, Group]
    seed_cells: dict[str, SeedCell]
    reliance: dict[str, Reliance]
    differences: dict[str, Difference]
    recovery: dict[str, Curve]  # continued training (posjax.evaluation.run.recovery)
    tasks: dict[str, TaskCell]  # posjax.evaluation.run.tasks
    task_seed_cells: dict[str, TaskSeedCell]
    algorithmic: dict[str, AlgorithmicCell]  # posjax.evaluation.run.algorithmic
    algorithmic_groups: dict[str, Group]
    algorithmic_seed_cells: dict[str, AlgorithmicSeedCell]
    algorithmic_scores: dict[str, AlgorithmicScore]
    algorithmic_differences: dict[str, AlgorithmicDifference]
    algorithmic_averages: dict[str, AlgorithmicAverage]


# Records whose undeclared fields are kept and not reported (see the module docstring).
OPEN = frozenset({"Settings", "Params"})
