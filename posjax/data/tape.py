"""The algorithmic tasks' tape in the batch contract: the input, then one empty token per
output place, padded to a bucket length.

Layout of a row (n input symbols, m = task.output_length(n) outputs, L >= n + m places):

    places      0 .. n-1          n .. n+m-1              n+m .. L-1
    input_ids   FIRST_SYMBOL + x  empty_id                0 ([PAD])
    segment_ids 1                 1                       0   (attention never reads padding)
    positions   0 .. n+m-1 (or an ordered random subset)  0
    mlm_targets 0                 the task's outputs      0
    mlm_weights 0                 1 (task_loss='outputs') 0
                                  or the task's mask ('mask')
    accuracy_weights 0            the task's mask         0

This is the reference's tape (google-deepmind/randomized_positional_encodings,
experiments/utils.py `make_model_with_empty_targets` with computation_steps_mult=0): the
input one-hots get one more class, the empty token, which fills the m output places; no mask
between input and outputs; the model reads its outputs at the last m places. The reference
optimizes the cross entropy at EVERY output place (also after a task's termination token,
where the targets are 0s) and scores accuracy over the task's mask; data.task_loss='mask'
trains on the mask's places only.

Symbols: task symbol s is token id FIRST_SYMBOL + s (posjax's vocabulary keeps its five
special ids first; tokenizer 'task_symbols'), the empty token is FIRST_SYMBOL + input_size.

Randomized positions (data.randomized_max_length, Ruoss et al.): ONE ordered random subset of
[0, randomized_max_length) of size n + m per batch, shared by all rows, as the reference draws
it (models/positional_encodings.py `noisy_fixed_positional_encodings`: one index vector per
call, broadcast over the batch), over the whole tape (inputs and empty tokens). The
reference's randomized RoPE and relative encodings draw again in every attention layer
(one rng key per layer call): with data.randomized_layers each layer gets its own subset,
batch['layer_positions'] [B, layers, L] (`layer_positions`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from posjax.data.packing import randomized_positions
from posjax.data.tokenizers import SPECIALS
from posjax.errors import ConfigError

FIRST_SYMBOL = len(SPECIALS)


def empty_id(input_size: int) -> int:
    return FIRST_SYMBOL + int(input_size)


def bucket_length(places: int, multiple: int, cap: Optional[int] = None) -> int:
    """The padded length of a tape of `places`: the next multiple of `multiple`, at most
    `cap` (data.seq_len), and never below `places`."""
    padded = -(-int(places) // int(multiple)) * int(multiple)
    if cap is not None:
        if places > cap:
            raise ConfigError("data.seq_len", cap, f"an int >= {places} (the longest tape: "
                              "input + one empty token per output)")
        padded = min(padded, int(cap))
    return padded


def tape_batch(sample, input_size: int, *, length: Optional[int] = None,
               positions: Optional[np.ndarray] = None, loss_on: str = "outputs") -> dict:
    """The batch-contract arrays of one task sample (inputs [B, n], outputs [B, m], mask
    [B, m]) laid out as a tape of `length` places (default n + m: no padding).

    positions: int [n + m] (one vector for every row) or [B, n + m]; default 0 .. n+m-1.
    loss_on: 'outputs' (every output place) or 'mask' (the task's mask), data.task_loss.
    """
    inputs = np.asarray(sample.inputs)
    outputs = np.asarray(sample.outputs)
    mask = np.asarray(sample.mask, bool)
    b, n = inputs.shape
    m = outputs.shape[1]
    t = n + m
    length = t if length is None else int(length)
    if length < t:
        raise ConfigError("length", length, f"an int >= {t} (input {n} + outputs {m})")
    if loss_on not in ("outputs", "mask"):
        raise ConfigError("data.task_loss", loss_on, "one of outputs, mask")
    ids = np.zeros((b, length), np.int32)
    ids[:, :n] = FIRST_SYMBOL + inputs
    ids[:, n:t] = empty_id(input_size)
    segments = np.zeros((b, length), np.int32)
    segments[:, :t] = 1
    pos = np.zeros((b, length), np.int32)
    pos[:, :t] = np.arange(t, dtype=np.int32) if positions is None else positions
    targets = np.zeros((b, length), np.int32)
    targets[:, n:t] = outputs
    accuracy = np.zeros((b, length), np.float32)
    accuracy[:, n:t] = mask
    weights = np.zeros((b, length), np.float32)
    weights[:, n:t] = 1.0 if loss_on == "outputs" else mask
    return {"input_ids": ids, "token_type_ids": np.zeros((b, length), np.int32),
            "positions": pos, "segment_ids": segments, "mlm_targets": targets,
            "mlm_weights": weights, "accuracy_weights": accuracy}


def layer_positions(rng: np.random.Generator, rows: int, places: int, length: int,
                    layers: int, randomized_max_length: int) -> np.ndarray:
    """[rows, layers, length] int32: each layer's own ordered random subset of
    [0, randomized_max_length) at the tape's `places` (shared by the rows, as the batch's
    positions are), 0 at the padding: batch['layer_positions'], which the encoder's layer i
    reads in place of batch['positions'] (data.randomized_layers)."""
    out = np.zeros((rows, layers, length), np.int32)
    for layer in range(layers):
        out[:, layer, :places] = tape_positions(rng, places, randomized_max_length)
    return out


def tape_positions(rng: np.random.Generator, places: int,
                   randomized_max_length: Optional[int]) -> Optional[np.ndarray]:
    """One ordered random subset of [0, randomized_max_length) for the whole batch, or None
    (plain 0 .. places-1) when randomization is off."""
    if randomized_max_length is None:
        return None
    if places > randomized_max_length:
        raise ConfigError("data.randomized_max_length", randomized_max_length,
                          f"an int >= {places} (the tape's places)")
    return randomized_positions(rng, places, int(randomized_max_length))
