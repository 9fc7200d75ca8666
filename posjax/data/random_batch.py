"""A batch of the batch contract filled with random tokens: for benchmarks and compile checks
that need the shapes and dtypes of real training input but not its text."""

from __future__ import annotations

import numpy as np

from posjax import schema


def random_batch(config, rng: np.random.Generator, mask_rate: float = 0.15) -> dict:
    """`config.data.batch_size` rows of `config.data.seq_len` random ids (>= 5, past the
    special tokens), one example per row, `mask_rate` of the places chosen for the MLM loss;
    `sop_labels` too when `config.model.sop` is on."""
    b, length = int(config.data.batch_size), int(config.data.seq_len)
    ids = rng.integers(5, int(config.model.vocab_size), size=(b, length), dtype=np.int32)
    weights = (rng.random((b, length)) < mask_rate).astype(np.float32)
    batch = {
        "input_ids": ids,
        "token_type_ids": np.zeros((b, length), np.int32),
        "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (b, length)).copy(),
        "segment_ids": np.ones((b, length), np.int32),
        "mlm_targets": np.where(weights > 0, ids, 0).astype(np.int32),
        "mlm_weights": weights,
    }
    if schema.view(config).model.sop:
        batch["sop_labels"] = rng.integers(0, 2, size=(b,), dtype=np.int32)
    return batch
