"""Rows: what evaluation scores at one length, from a held-out text stream
(posjax.data.heldout) or from held-out images (posjax.data.patches)."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Rows:
    """The rows of one length: batch-contract arrays [R, L] plus per-row bookkeeping."""

    arrays: dict[str, np.ndarray]  # input_ids, token_type_ids, positions, segment_ids,
    #                                mlm_targets, mlm_weights (zero outside the scored part)
    stream_index: np.ndarray  # [R, L] int64: stream token of each column, -1 for [CLS]/[SEP]
    cluster: np.ndarray  # [R] int32: cluster (document, or span of one) of the row's first token
    crosses: np.ndarray  # [R] bool: the row holds tokens of more than one document

    @property
    def crossing(self) -> int:
        return int(np.count_nonzero(self.crosses))
