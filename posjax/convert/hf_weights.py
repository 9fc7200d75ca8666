"""Reading a HF checkpoint's tensors and laying them out as posjax parameters.

A HF state dict is read into float32 numpy arrays (safetensors through the `safetensors`
package with numpy, no torch needed; pytorch_model.bin only when torch is installed). The
per-architecture mappers (bert.py, albert.py, deberta.py) turn names and layouts into the
posjax pure-dict param tree; `assemble` then checks every posjax parameter against the model's
own shapes and reports anything left over.

Layout rules (torch Linear weight is [out, in]; posjax Dense kernel is [*in, *out]):
  query/key/value kernel [E, H, D] = W.T.reshape(E, H, D)    bias [H, D]
  attention output       [H, D, E] = W.T.reshape(H, D, E)    (HF flattens heads head-major)
"""

from __future__ import annotations

import glob
import json
import logging
import os
from typing import Any, Iterable, Optional

import numpy as np
import safetensors.numpy

from posjax.errors import ConfigError

log = logging.getLogger(__name__)

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_BIN = "pytorch_model.bin"


# -- reading ---------------------------------------------------------------------------------


def weight_files(hf_dir: str) -> list[str]:
    """The weight files of a HF directory, preferring safetensors; ConfigError if none."""
    single = os.path.join(hf_dir, SAFETENSORS)
    if os.path.isfile(single):
        return [single]
    index = os.path.join(hf_dir, SAFETENSORS_INDEX)
    if os.path.isfile(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(hf_dir, s) for s in shards]
    binary = os.path.join(hf_dir, TORCH_BIN)
    if os.path.isfile(binary):
        return [binary]
    found = sorted(os.path.basename(p) for p in glob.glob(os.path.join(hf_dir, "*")))
    raise ConfigError("--hf", hf_dir, f"a directory holding {SAFETENSORS} or {TORCH_BIN} "
                      f"(found: {', '.join(found) or 'nothing'})")


def read_state_dict(hf_dir: str) -> dict[str, np.ndarray]:
    """name -> float32 numpy array for every tensor of the checkpoint."""
    out: dict[str, np.ndarray] = {}
    for path in weight_files(hf_dir):
        if path.endswith(".safetensors"):
            try:
                tensors = safetensors.numpy.load_file(path)
            except Exception as e:  # bf16 tensors cannot be read by numpy; torch can
                tensors = _safetensors_with_torch(path, e)
        else:
            tensors = _torch_bin(path)
        for name, value in tensors.items():
            value = np.asarray(value)
            out[name] = value.astype(np.float32) if np.issubdtype(value.dtype, np.floating) else value
    return out


def _safetensors_with_torch(path: str, error: Exception) -> dict:
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise ConfigError(SAFETENSORS, path, f"tensors numpy can read ({error}); install torch "
                          "to read bfloat16 checkpoints") from None
    return {k: v.float().numpy() if v.is_floating_point() else v.numpy()
            for k, v in load_file(path).items()}


def _torch_bin(path: str) -> dict:
    try:
        import torch
    except ImportError:
        raise ConfigError(TORCH_BIN, path, f"a {SAFETENSORS} instead (reading {TORCH_BIN} needs "
                          "torch: pip install torch)") from None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in state.items()}


class Weights:
    """A state dict with the base-model prefix stripped, that remembers what was used."""

    def __init__(self, tensors: dict[str, np.ndarray], prefix: str):
        self.tensors = {}
        for name, value in tensors.items():
            self.tensors[name[len(prefix):] if name.startswith(prefix) else name] = value
        self.used: set[str] = set()

    def has(self, name: str) -> bool:
        return name in self.tensors

    def get(self, name: str) -> np.ndarray:
        if name not in self.tensors:
            raise ConfigError("checkpoint tensor", name,
                              "present in the weights (the checkpoint does not match its config.json)")
        self.used.add(name)
        return self.tensors[name]

    def mark_used(self, names: Iterable[str]) -> None:
        self.used.update(n for n in names if n in self.tensors)

    def unused(self) -> list[str]:
        return sorted(set(self.tensors) - self.used)


# -- layouts ---------------------------------------------------------------------------------


def dense(w: Weights, name: str, bias: bool = True) -> dict:
    """torch Linear `name` -> posjax Dense {'kernel' [in, out], 'bias' [out]}."""
    out = {"kernel": w.get(f"{name}.weight").T}
    if bias:
        out["bias"] = w.get(f"{name}.bias")
    return out


def heads_in(w: Weights, name: str, heads: int, head_dim: int) -> dict:
    """Query/key/value projection: kernel [E, H, D], bias [H, D]."""
    weight, b = w.get(f"{name}.weight"), w.get(f"{name}.bias")
    return {"kernel": weight.T.reshape(weight.shape[1], heads, head_dim),
            "bias": b.reshape(heads, head_dim)}


def heads_out(w: Weights, name: str, heads: int, head_dim: int) -> dict:
    """Attention output projection: kernel [H, D, E], bias [E]."""
    weight = w.get(f"{name}.weight")
    return {"kernel": weight.T.reshape(heads, head_dim, weight.shape[0]), "bias": w.get(f"{name}.bias")}


def norm(w: Weights, name: str) -> dict:
    return {"scale": w.get(f"{name}.weight"), "bias": w.get(f"{name}.bias")}


def bert_layer(w: Weights, p: str, heads: int, head_dim: int, q="query", k="key", v="value") -> dict:
    """One BERT-layout layer `p` (e.g. 'encoder.layer.3') as a posjax TransformerLayer."""
    return {
        "attention": {
            "query": heads_in(w, f"{p}.attention.self.{q}", heads, head_dim),
            "key": heads_in(w, f"{p}.attention.self.{k}", heads, head_dim),
            "value": heads_in(w, f"{p}.attention.self.{v}", heads, head_dim),
            "out": heads_out(w, f"{p}.attention.output.dense", heads, head_dim),
        },
        "attention_norm": norm(w, f"{p}.attention.output.LayerNorm"),
        "mlp": {"wi": dense(w, f"{p}.intermediate.dense"), "wo": dense(w, f"{p}.output.dense")},
        "mlp_norm": norm(w, f"{p}.output.LayerNorm"),
    }


def mlm_head(w: Weights, names: dict, word: np.ndarray) -> Optional[dict]:
    """BERT-style MLM head, or None when the checkpoint has none.

    names: {'dense', 'norm', 'bias', 'decoder'} HF names. posjax ties the output projection to
    the word embeddings; an untied decoder that differs from them is refused.
    """
    if not w.has(f"{names['dense']}.weight"):
        return None
    decoder = f"{names['decoder']}.weight"
    if w.has(decoder):
        table = w.get(decoder)
        if table.shape != word.shape or not np.allclose(table, word, atol=1e-6):
            raise ConfigError("checkpoint tensor", decoder,
                              "equal to the word embeddings (posjax ties the MLM output projection)")
    bias_name = names["bias"] if w.has(names["bias"]) else f"{names['decoder']}.bias"
    head = {"transform": dense(w, names["dense"]), "norm": norm(w, names["norm"]),
            "bias": w.get(bias_name)}
    w.mark_used([f"{names['decoder']}.bias"])
    return head


# -- assembling ------------------------------------------------------------------------------


def flatten(tree: Any, prefix=()) -> dict:
    """{path tuple: leaf} of a nested dict (layer keys stay ints)."""
    if isinstance(tree, dict):
        out = {}
        for key, sub in tree.items():
            out.update(flatten(sub, prefix + (key,)))
        return out
    return {prefix: tree}


def _unflatten(flat: dict) -> dict:
    out: dict = {}
    for path, value in flat.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def path_name(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def assemble(target: dict, mapped: dict, *, fresh_ok: tuple[str, ...] = ()) -> tuple[dict, list[str]]:
    """Fill the posjax param tree `target` (pure dict of arrays, the model's own init) with
    `mapped`. Returns (params, names of params kept at their fresh init).

    Every mapped array must have exactly the target's shape; a target param that was not
    mapped is an error unless its name starts with one of `fresh_ok`; a mapped name the model
    lacks is an error.
    """
    flat_t, flat_m = flatten(target), flatten(mapped)
    out, fresh = {}, []
    for path, value in flat_t.items():
        name = path_name(path)
        if path in flat_m:
            array = np.asarray(flat_m[path], np.float32)
            if tuple(array.shape) != tuple(value.shape):
                raise ConfigError(f"param {name}", tuple(array.shape),
                                  f"shape {tuple(value.shape)} (posjax layout of this model)")
            out[path] = array
        elif name.startswith(fresh_ok):
            out[path] = np.asarray(value)
            fresh.append(name)
        else:
            raise ConfigError(f"param {name}", None, "mapped from the checkpoint (converter bug: "
                              "the posjax model has a parameter no HF tensor fills)")
    extra = [path_name(p) for p in flat_m if p not in flat_t]
    if extra:
        raise ConfigError("mapped params", extra[:3], "names of the posjax model (converter bug)")
    return _unflatten(out), fresh
