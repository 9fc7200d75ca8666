"""PoSE: positional skip-wise training (Zhu et al., ICLR 2024, "PoSE: Efficient Context Window
Extension of LLMs via Positional Skip-wise Training"; the authors' code is dwzhu-pku/PoSE,
src/train_pose.py `train_preprocess_function_pose`).

A training example of n tokens keeps its tokens, but its positions are cut into N contiguous
chunks c_0 .. c_{N-1} of lengths l_i (sum n) and chunk i is shifted by a skip bias u_i:

    positions of c_i = u_i + st_i, ..., u_i + st_i + l_i - 1,    st_i = l_0 + ... + l_{i-1}
    u_0 = 0,  u_i ~ U{u_{i-1}, ..., L_t - n}  (integers, both ends included)

so positions stay contiguous inside a chunk, strictly increasing across chunks (u is
non-decreasing) and below the target window L_t (data.pose_target_length): the model sees
relative positions up to L_t - 1 while training on rows of data.seq_len tokens. The lengths and
biases are drawn again for every example (each example of a packed row, each task row). At
evaluation positions are plain 0 .. n-1 (the pipeline never calls this outside training). Like
randomized positions, this only changes position arrays, so it works with any 1-D scheme that
encodes positions up to L_t - 1 (a learned table needs L_t rows: posjax.models.spec checks
it). It replaces randomized positions, so the two are never on together, nor with
data.randomized_layers' per-layer draws.

Choices, and where the authors' code and the paper differ (the code wins where it has the case):
- u_0 = 0, as the paper sets it and the code does since a revision (it first drew u_0 too; fixed
  at 0 "makes the coverage possibility more uniform for large relative positions").
- N = 2 (the paper's default, the only case the code has): l_0 ~ U{1, ..., ceil(n/2)} (the first
  chunk is at most half), l_1 = n - l_0. The paper's coverage simulation (Appendix B, Figure 6)
  draws l_0 ~ U{1, ..., n-1} instead.
- N >= 3 (no training code): the paper's Figure 6 three-chunk draw, extended: l_i ~ U{1, ...,
  n - st_i - (N-1-i)} one after another (each later chunk keeps at least one token), the last
  chunk takes the rest. N = 1 is one chunk at u_0 = 0: plain positions (the paper's Table 5 row).
- An example shorter than N tokens is cut into n chunks of one token.
- Not done here: the code and the paper also skip through the TEXT (chunk i's tokens come from a
  later span of a longer document, eq. 5); posjax rows keep their packed text, the paper's
  v_i = 0 variant, which it reports makes little difference (Section 3.2). The position
  interpolation the paper fine-tunes with is the scheme's own setting (e.g. a RoPE scaling).

numpy only (the input pipeline never imports JAX); each example draws from its row's generator,
after the masks, so masks and ids are the same with PoSE on or off.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posjax import schema
from posjax.errors import ConfigError, check

TARGET, CHUNKS = "data.pose_target_length", "data.pose_chunks"
# Corpora whose rows place their own positions: algorithmic tapes (the curriculum's draws) and
# patch images (2-D grid positions).
OWN_POSITIONS = ("algorithmic", "patches")


def chunk_lengths(rng: np.random.Generator, length: int, chunks: int) -> np.ndarray:
    """int64 [min(chunks, length)]: the chunk lengths of one example (positive, sum `length`)."""
    k = min(chunks, length)
    if k == 1:
        return np.array([length])
    if k == 2:  # the authors' code: the first chunk is at most half the example
        first = int(rng.integers(1, (length + 1) // 2, endpoint=True))
        return np.array([first, length - first])
    lengths, left = [], length
    for i in range(k - 1):
        lengths.append(int(rng.integers(1, left - (k - 1 - i), endpoint=True)))
        left -= lengths[-1]
    return np.array(lengths + [left])


def skip_biases(rng: np.random.Generator, length: int, target_length: int,
                chunks: int) -> np.ndarray:
    """int64 [chunks]: u_0 = 0, then each u_i uniform in [u_{i-1}, target_length - length]."""
    biases = [0]
    for _ in range(chunks - 1):
        biases.append(int(rng.integers(biases[-1], target_length - length, endpoint=True)))
    return np.array(biases)


def pose_positions(rng: np.random.Generator, length: int, target_length: int,
                   chunks: int) -> np.ndarray:
    """int32 [length]: one example's PoSE positions, strictly increasing, in [0, target_length),
    the first chunk starting at 0. Draws the chunk lengths, then the skip biases."""
    if not 1 <= length <= target_length:
        raise ConfigError(TARGET, target_length, f"at least the example length {length}")
    if chunks < 1:
        raise ConfigError(CHUNKS, chunks, "an int >= 1")
    lengths = chunk_lengths(rng, length, chunks)
    biases = skip_biases(rng, length, target_length, lengths.size)
    return (np.arange(length) + np.repeat(biases, lengths)).astype(np.int32)


def check_config(config: Any) -> None:
    """The PoSE fields against the rest of the config: one ConfigError line each."""
    target = schema.checked(config, TARGET)
    chunks = schema.checked(config, CHUNKS)
    seq_len = schema.checked(config, "data.seq_len")
    check(target == 0 or target > seq_len, TARGET, target,
          f"0 (off) or an int > data.seq_len={seq_len} (the window the positions reach)")
    check(chunks <= seq_len, CHUNKS, chunks,
          f"an int in [1, data.seq_len={seq_len}] (every chunk holds at least one token)")
    if not target:
        return
    rml = schema.value(config, "data.randomized_max_length")
    check(rml is None, TARGET, target, f"0 while data.randomized_max_length={rml} is set "
          "(both replace the training positions: set one of them)")
    layers = schema.value(config, "data.randomized_layers")
    check(not layers, "data.randomized_layers", layers, f"False with {TARGET}={target} "
          "(PoSE gives an example one set of positions, shared by every layer)")
    corpus = schema.value(config, "data.corpus")
    check(corpus not in OWN_POSITIONS, TARGET, target,
          f"0 with data.corpus='{corpus}' (its rows place their own positions)")
