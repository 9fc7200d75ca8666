"""posjax params -> HF tensors by running the import's own mapping backwards.

The import (bert.map_weights, modernbert.map_weights) is a pure rearrangement: transposes,
reshapes, row slices and gathers of the HF tensors. Feeding it "probe" tensors whose elements
are their own global indices shows where every posjax element comes from, so the export is
a scatter along those indices: no second name table to keep in step with the first.

HF names and shapes come from transformers' model for the written config, built on torch's
meta device (no memory, no init). Tied tensors (the MLM decoder) appear once there.
Elements of a tensor the import reads but no posjax parameter fills are written as zeros
(RoBERTa's rows before its first position, the token-type row a folded model lacks, see
`hf_tensors`); tensors the import never reads are not written: a pooler (posjax has none;
transformers reports it MISSING and initializes it) and RoFormer's fixed sinusoid buffer
(written by to_hf/__init__.py from bert.roformer_table).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from posjax.convert.hf_weights import Weights, flatten, path_name
from posjax.errors import ConfigError


class _Probe(Weights):
    """Weights that remember which tensors the mapping read."""

    def __init__(self, tensors: dict, prefix: str):
        super().__init__(tensors, prefix)
        self.read: set[str] = set()

    def get(self, name: str) -> np.ndarray:
        value = super().get(name)
        self.read.add(name)
        return value


def hf_tensors(map_weights: Callable, shapes: dict, prefix: str, config, src, params: dict,
               perm, *, has_head: bool) -> dict:
    """{HF name: float32 array} for the posjax `params` of the model `config` describes.

    map_weights: the import's mapper of the family; shapes: {HF name: shape} of every HF
    parameter; prefix: the base-model prefix ('bert.', 'model.', ...) of those names;
    src: the import's Source for the written config.json; perm: posjax id -> HF id or None.
    """
    names = list(shapes)
    sizes = [int(np.prod(shapes[n], dtype=np.int64)) for n in names]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    dtype = np.int32 if offsets[-1] < 2**31 else np.int64
    probe = {n: np.arange(offsets[i], offsets[i + 1], dtype=dtype).reshape(shapes[n])
             for i, n in enumerate(names)}
    w = _Probe(probe, prefix)
    # The import folds a single token-type row into the position table (a sum); backwards,
    # the table takes the whole sum and the token-type row is left at zero.
    mapped, found_head = map_weights(w, config, dataclasses.replace(src, fold_token_type=False),
                                     perm)
    if found_head != has_head:
        raise ConfigError("MLM head", has_head, f"{found_head} (the transformers model built "
                          "for the export disagrees: converter bug)")
    flat_m, flat_p = flatten(mapped), flatten(params)
    left = [path_name(p) for p in flat_p
            if p not in flat_m and (has_head or p[0] != "lm_head")]
    if left:
        raise ConfigError("param", left[:3], "one the transformers model holds (this posjax "
                          "model has parameters the exported family lacks)")
    flat = np.zeros(int(offsets[-1]), np.float32)
    for path, index in flat_m.items():
        value = np.asarray(flat_p[path], np.float32)
        if value.shape != index.shape:
            raise ConfigError(f"param {path_name(path)}", value.shape,
                              f"shape {index.shape} (the exported layout; converter bug)")
        flat[index.ravel()] = value.ravel()
    for path, index in flat_m.items():  # one HF element per posjax element, no conflicts
        if not np.array_equal(flat[index], np.asarray(flat_p[path], np.float32)):
            raise ConfigError(f"param {path_name(path)}", "written twice with different values",
                              "one place per element in the HF tensors (converter bug)")
    full = {name[len(prefix):] if name.startswith(prefix) else name: name for name in names}
    read = {full[r] for r in w.read}
    return {name: flat[offsets[i]: offsets[i + 1]].reshape(shapes[name])
            for i, name in enumerate(names) if name in read}
