"""One algorithmic cell: a trained tape model at one test length, scored per sequence.

The test sequences: `Settings.sequences` rows of the task at the length, drawn by numpy's
Generator seeded with (Settings.seed, SEQUENCE_STREAM, length), so every run of one task sees
the SAME sequences at a length (cells pair by sequence) and every length its own. They are the
clusters of every interval (posjax.evaluation.stats.intervals): a sequence's places share its input.

The score is the reference's masked accuracy (google-deepmind/randomized_positional_encodings,
experiments/example.py `accuracy_fn`: argmax == target, summed where the task's mask holds,
over the number of such places), kept per sequence as sums (`correct`, `count`, and `loss`,
the cross entropy summed over the same places), so accuracy = sum(correct) / sum(count) over
any set of sequences and seeds. The reference averages that ratio over sub-batches of 64
rows (experiments/range_evaluation.py); with rows of one mask size (every task but those
with a termination token) the two are the same number.

Test-time behaviour (Settings.dropout, Settings.positions), the reference's by default:
  dropout    True: dropout stays on at evaluation, as in the reference, whose haiku model
             applies hk.dropout whenever it is given an rng key and whose range evaluation
             always passes one (models/transformer.py, range_evaluation.py). The masks are
             seeded by (seed, length, batch), the same for every run. False: deterministic.
  positions  'reference': a run trained with randomized positions (data.randomized_max_length)
             is tested with randomized positions too, an ordered random subset of
             [0, randomized_max_length) over the whole tape, as the reference's noisy
             encodings draw one at every call (models/positional_encodings.py
             `noisy_fixed_positional_encodings`, `compute_attention_with_noisy_relative_
             encodings`, transformer.py NOISY_ROTARY: hk.next_rng_key() in the forward pass).
             Here each SEQUENCE draws its own subset (seeded by (seed, POSITION_STREAM,
             length), the same for every run), where the reference shares one per call of 64
             rows: the same distribution for every row, and independent sequences, so the
             bootstrap over sequences also covers the position draw. The reference's rotary
             and relative encodings draw again in every layer: a run trained with
             data.randomized_layers is tested with each sequence's own draw per layer too
             (batch['layer_positions']). Plain runs use 0 .. n-1.
             'plain': 0 .. n-1 for every run (positions never seen by a randomized run's
             training as such a dense block, except by chance).

Shapes: the tape is padded to a multiple of Settings.bucket (at most model.max_length), so
test lengths share compiled programs; padding is masked out (posjax.data.tape). Rows per
forward pass: the sequences in as few equal passes as Settings.batch_tokens tokens allow.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from posjax import models, schema
from posjax.data import algorithmic, curriculum, tape
from posjax.data.packing import randomized_positions
from posjax.errors import ConfigError, check
from posjax.evaluation.run import options
from posjax.evaluation.methods import NotApplicable
from posjax.training.state import abstract_model, to_params_state

VERSION = 1
SEQUENCE_STREAM, POSITION_STREAM, LAYER_POSITION_STREAM = 11, 12, 13
POSITIONS = ("reference", "plain")
DEFAULT_SEQUENCES = options.default("sequences")  # clusters per cell
DEFAULT_BUCKET = 64


@dataclasses.dataclass(frozen=True)
class Settings:
    sequences: int = DEFAULT_SEQUENCES
    seed: int = 0
    dropout: bool = True  # the reference's evaluation keeps dropout on
    positions: str = "reference"  # randomized runs tested with randomized positions
    bucket: int = DEFAULT_BUCKET
    batch_tokens: int = 16384

    def key(self) -> str:
        """What a cell's numbers depend on besides the weights and the length (dropout
        masks depend on the batch shapes, hence bucket and batch_tokens)."""
        fields = [VERSION, self.sequences, self.seed, self.dropout, self.positions,
                  self.bucket, self.batch_tokens]
        return hashlib.blake2b(json.dumps(fields).encode(), digest_size=4).hexdigest()

    def words(self) -> str:
        return (f"{self.sequences} sequences per length (seed {self.seed}); dropout "
                f"{'on (the reference)' if self.dropout else 'off'} at evaluation; "
                + ("randomized runs tested with randomized positions (the reference)"
                   if self.positions == "reference" else "positions 0..n-1 for every run"))


def _int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def check_settings(s: Settings) -> Settings:
    check(_int(s.sequences) and s.sequences >= 2, "sequences", s.sequences,
          "an int >= 2 (test sequences per length; >= 20 gives a bootstrap interval)")
    check(isinstance(s.dropout, bool), "test_dropout", s.dropout, "true or false")
    check(s.positions in POSITIONS, "test_positions", s.positions, f"one of {', '.join(POSITIONS)}")
    check(_int(s.bucket) and s.bucket >= 1, "bucket", s.bucket, "a positive int")
    check(_int(s.batch_tokens) and s.batch_tokens >= 1, "batch_tokens", s.batch_tokens,
          "a positive int (tokens per evaluation batch)")
    return s


def is_algorithmic(config: Any) -> bool:
    return schema.view(config).data.corpus == "algorithmic"


def task_of(config: Any):
    return algorithmic.get(schema.view(config).data.task)


def max_input_length(config: Any) -> int:
    return int(schema.view(config).data.max_input_length)


def randomized(config: Any, settings: Settings) -> Optional[int]:
    """The range test positions are drawn from, or None for 0 .. n-1."""
    if settings.positions != "reference":
        return None
    return schema.view(config).data.randomized_max_length


def _rng(seed: int, stream: int, length: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, stream,
                                                         int(length)]))


def test_sample(task, length: int, settings: Settings) -> algorithmic.Sample:
    """The test sequences of `task` at `length` (the same for every run)."""
    return task.sample(_rng(settings.seed, SEQUENCE_STREAM, length), settings.sequences,
                       int(length))


def test_positions(places: int, rows: int, max_length: Optional[int], length: int,
                   settings: Settings) -> Optional[np.ndarray]:
    """[rows, places] ordered random subsets of [0, max_length), one per sequence, or None."""
    if max_length is None:
        return None
    rng = _rng(settings.seed, POSITION_STREAM, length)
    return np.stack([randomized_positions(rng, places, int(max_length)) for _ in range(rows)])


def test_tape(config: Any, length: int, settings: Settings) -> tuple[dict, int]:
    """(the tape batch of the test sequences at `length`, their places); NotApplicable when
    the tape does not fit the model or the randomized range."""
    task = task_of(config)
    sample = test_sample(task, length, settings)
    places = int(sample.inputs.shape[1] + sample.outputs.shape[1])
    cap = int(schema.view(config).model.max_length)
    if places > cap:
        raise NotApplicable(f"the tape has {places} places, more than model.max_length={cap}")
    rml = randomized(config, settings)
    if rml is not None and places > rml:
        raise NotApplicable(f"the tape has {places} places, more than the randomized range "
                            f"data.randomized_max_length={rml}")
    positions = test_positions(places, settings.sequences, rml, length, settings)
    padded = tape.bucket_length(places, settings.bucket, cap)
    batch = tape.tape_batch(sample, task.input_size, length=padded, positions=positions,
                            loss_on="mask")
    layers = curriculum.randomized_layers(config) if rml is not None else 0
    if layers:  # each sequence's own draw in every layer, as its batch positions
        rng = _rng(settings.seed, LAYER_POSITION_STREAM, length)
        batch["layer_positions"] = np.concatenate([
            tape.layer_positions(rng, 1, places, padded, layers, int(rml))
            for _ in range(settings.sequences)])
    return batch, places


_SCORERS: dict = {}


def _model_key(config: Any, dropout: bool) -> str:
    d = config.to_dict()
    for k in ("train", "seed", "checkpoint", "logging", "data"):
        d.pop(k, None)
    return json.dumps([d, dropout], sort_keys=True, default=str)


def abstract_params(config: Any) -> dict:
    """The pure-dict layout (shapes only) of the config's tape model's params."""
    return nnx.to_pure_dict(abstract_model(config, models.build_model)[1])


def scorer(config: Any, dropout: bool):
    """jit(params, batch, key) -> per-row sums {correct, count, loss} of the config's tape
    model. One is kept (it holds its compiled programs); runs that differ only in seed or
    data fields (a randomized twin) share it."""
    memo = _model_key(config, dropout)
    if memo not in _SCORERS:
        graphdef, abs_params, _, _ = abstract_model(config, models.build_model)
        treedef = jax.tree.structure(abs_params)

        def score(params, batch, key):
            model = nnx.merge(graphdef, to_params_state(treedef, params))
            rngs = nnx.Rngs(dropout=key) if dropout else None
            logits = model(batch, deterministic=not dropout, rngs=rngs)["task_logits"]
            logits = logits.astype(jnp.float32)
            targets = batch["mlm_targets"]
            w = batch["accuracy_weights"].astype(jnp.float32)
            # argmax == target, as the reference's accuracy_fn (ties: the first class)
            hit = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
            return {"correct": jnp.sum(hit * w, axis=1), "count": jnp.sum(w, axis=1),
                    "loss": jnp.sum(jnp.where(w > 0, ce * w, 0.0), axis=1)}

        _SCORERS.clear()
        _SCORERS[memo] = jax.jit(score)
    return _SCORERS[memo]


def dropout_key(settings: Settings, length: int, batch: int) -> jax.Array:
    return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(settings.seed), length),
                              batch)


def score(config: Any, params: Any, length: int, settings: Settings) -> dict:
    """{rows: {correct, count, loss, cluster}, places, padded, rows_per_batch, wall_s,
    first_batch_s} of `params` (a pure dict of the config's tape model) at `length`."""
    batch, places = test_tape(config, length, settings)
    fn = scorer(config, settings.dropout)
    n, padded = batch["input_ids"].shape
    # as few forward passes as batch_tokens allows, split evenly (no row computed twice)
    passes = -(-n // max(1, min(n, settings.batch_tokens // padded)))
    per = -(-n // passes)
    sums = {k: [] for k in ("correct", "count", "loss")}
    t0 = time.perf_counter()
    first = None
    for b, start in enumerate(range(0, n, per)):
        part = {k: v[start:start + per] for k, v in batch.items()}
        real = part["input_ids"].shape[0]
        if real < per:  # one shape per cell: pad with copies of row 0, then drop them
            part = {k: np.concatenate([v, np.repeat(v[:1], per - real, axis=0)])
                    for k, v in part.items()}
        out = jax.device_get(fn(params, part, dropout_key(settings, length, b)))
        if first is None:
            first = time.perf_counter() - t0
        for k in sums:
            sums[k].append(np.asarray(out[k], np.float64)[:real])
    rows = {k: np.concatenate(v) for k, v in sums.items()}
    return {"rows": {"correct": [int(round(x)) for x in rows["correct"]],
                     "count": [int(round(x)) for x in rows["count"]],
                     "loss": [float(f"{x:.7g}") for x in rows["loss"]],
                     "cluster": list(range(n))},
            "places": places, "padded": int(padded), "rows_per_batch": per,
            "wall_s": time.perf_counter() - t0, "first_batch_s": first}


def check_lengths(lengths) -> list[int]:
    """The test lengths as sorted distinct ints >= 1 (ConfigError otherwise)."""
    check(lengths is not None and len(lengths) > 0, "lengths", lengths,
          "a non-empty list of test lengths (ints >= 1), e.g. 41..500")
    for n in lengths:
        if not (_int(n) and n >= 1):
            raise ConfigError("lengths", n, "ints >= 1 (input lengths of the task)")
    return sorted({int(n) for n in lengths})


def default_lengths(max_input: int, longest: int = 500, stride: int = 9) -> list[int]:
    """Every training length 1..max_input, then the test lengths max_input+1 .. longest in
    steps of `stride` (41, 50, ..., 500 for the reference's 40: 52 lengths, both ends in)."""
    return list(range(1, int(max_input) + 1)) + list(range(int(max_input) + 1, longest + 1,
                                                           stride))
