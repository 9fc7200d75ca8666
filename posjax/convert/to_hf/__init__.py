"""posjax model -> a Hugging Face folder that transformers' AutoModel(ForMaskedLM) loads.

    python -m posjax.convert --to_hf workdirs/minilm_8k --out hf/minilm_8k [--overwrite]

Families: BERT, RoBERTa, RoFormer, ModernBERT (families.py says what each expresses). A
learned table extended by pretrained.extend is written as a plain table of the new length;
a ModernBERT RoPE scaling goes into rope_parameters. Everything is decided and checked
(config round trip, weights, tokenizer) before the first file is written; the files go to
a temporary folder next to --out that is renamed into place at the end.

Needs transformers and torch (requirements-hf.txt): the HF parameter names and shapes come
from transformers' own model for the written config.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
import jax
import numpy as np
from safetensors.numpy import save_file

from posjax import positions, schema, storage
from posjax.convert.bert import roformer_table
from posjax.convert.core import MAPPERS
from posjax.convert.hf_config import posjax_config
from posjax.convert.to_hf import families
from posjax.convert.to_hf.tokenizer import tokenizer_files
from posjax.convert.to_hf.weights import hf_tensors
from posjax.errors import ConfigError
from posjax.models import model_dims

SAFETENSORS = "model.safetensors"


@dataclasses.dataclass
class Export:
    """Everything --to_hf writes, computed before writing."""

    family: str
    architecture: str
    config: object  # transformers PretrainedConfig
    tensors: dict
    tokenizer: dict
    max_positions: int  # positions the exported model serves
    notes: list


def check_out(out: str, overwrite: bool) -> None:
    """--out must be local and new or empty, unless --overwrite."""
    if not storage.is_local(out):
        raise ConfigError("--out", out, "a local directory (transformers loads local folders)")
    if os.path.isfile(out):
        raise ConfigError("--out", out, "a directory (this is a file)")
    if os.path.isdir(out) and os.listdir(out) and not overwrite:
        raise ConfigError("--out", out, "a new or empty directory, or pass --overwrite to "
                          "replace it")


def _plain_params(config, params: dict) -> dict:
    """numpy params; a learned-table scheme's vectors at 0..max_length-1 as a plain table."""
    params = jax.tree.map(np.asarray, params)
    if config.position.name in families.table_schemes():
        scheme = positions.make(config.position).bind(model_dims(config))
        tree = params["encoder"]["embeddings"]["position"]["tree"]
        rows = np.arange(int(config.model.max_length), dtype=np.int32)
        table = np.asarray(scheme.vectors(tree, rows), np.float32)
        params["encoder"]["embeddings"]["position"]["tree"] = dict(tree, table=table)
    return params


def _hf_model_shapes(hf: dict, has_head: bool):
    """(transformers config, model class name, {name: shape}) built on the meta device."""
    try:
        import torch
        import transformers
    except ImportError as e:
        raise ConfigError("--to_hf", "without transformers/torch", f"transformers and torch "
                          f"installed (pip install -r requirements-hf.txt): {e}") from None
    fields = dict(hf)
    cfg = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    cfg.dtype = "float32"
    auto = transformers.AutoModelForMaskedLM if has_head else transformers.AutoModel
    with torch.device("meta"):
        model = auto.from_config(cfg)
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    return cfg, type(model).__name__, shapes


def prepare(model) -> Export:
    """The export of a posjax.pretrained.Pretrained (ConfigError when it has none)."""
    config, metadata = model.config, model.metadata
    family = families.family_of(config, metadata)
    hf_ids = model.hf_ids

    def vocab_to_hf(i: int) -> int:
        return int(hf_ids[i]) if hf_ids is not None else i

    plain = families.plain_config(config)
    check = families.hf_fields(family, plain, families.token_ids(metadata, vocab_to_hf))
    families.check_round_trip(plain, check, family)
    hf = families.with_scaling(family, check, config)
    # convert.json records whether the HF checkpoint brought a head; a workdir without one
    # was pretrained by posjax, whose model always has its MLM head.
    has_head = bool(metadata.get("has_mlm_head", True))
    cfg, architecture, shapes = _hf_model_shapes(hf, has_head)
    import_config, src = posjax_config(dict(check))
    tensors = hf_tensors(MAPPERS[family].map_weights, shapes, src.prefix, import_config, src,
                         _plain_params(config, model.params), hf_ids, has_head=has_head)
    if family == "roformer":  # its sinusoid buffer, so transformers reports nothing missing
        name = f"{src.prefix if has_head else ''}encoder.embed_positions.weight"
        tensors[name] = roformer_table(*shapes[name])
    cfg.architectures = [architecture]
    length = int(config.model.max_length)
    files, note = tokenizer_files(model.vocab, schema.view(config).data.tokenizer, hf_ids, metadata,
                                  length, token_types=family != "modernbert")
    notes = [note] if note else []
    if not has_head:
        notes.append("the workdir has no MLM head (the HF checkpoint had none): exported as "
                     f"{architecture}")
    return Export(family, architecture, cfg, tensors, files, length, notes)


def _write(export: Export, folder: str) -> None:
    export.config.save_pretrained(folder)
    weights = os.path.join(folder, SAFETENSORS)
    save_file({k: np.ascontiguousarray(v) for k, v in export.tensors.items()}, weights,
              metadata={"format": "pt"})
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(weights, 0o666 & ~umask)  # safetensors creates it 0600
    for name, content in export.tokenizer.items():
        mode = "wb" if isinstance(content, bytes) else "w"
        with open(os.path.join(folder, name), mode) as f:
            f.write(content)


def _new_folder(parent: str, name: str, kind: str) -> str:
    """A new folder `.name.kind-XXXXXXXX` in `parent`, with the umask's permissions (unlike
    tempfile.mkdtemp's 0700: the export is an ordinary folder once renamed)."""
    while True:
        path = os.path.join(parent, f".{name}.{kind}-{uuid.uuid4().hex[:8]}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue


def write(export: Export, out: str, *, overwrite: bool = False) -> str:
    """Write into a temporary folder beside `out`, then rename it into place."""
    check_out(out, overwrite)
    out = os.path.abspath(out)
    parent, name = os.path.split(out)
    os.makedirs(parent, exist_ok=True)
    tmp = _new_folder(parent, name, "tmp")
    try:
        _write(export, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if os.path.isdir(out):
        old = _new_folder(parent, name, "old")
        os.rename(out, os.path.join(old, name))
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return out


def export(model, out: str, *, overwrite: bool = False) -> tuple[str, Export]:
    """Check `out`, prepare the export of `model` (a Pretrained), write it; (path, Export)."""
    check_out(out, overwrite)
    prepared = prepare(model)
    return write(prepared, out, overwrite=overwrite), prepared


def summary(path: str, e: Export) -> str:
    tok = ", ".join(sorted(e.tokenizer)) or "none"
    cfg = e.config
    return (f"wrote {path}: {e.architecture} ({e.family}), {cfg.num_hidden_layers} layers x "
            f"{cfg.hidden_size}, {e.max_positions} positions; tokenizer files: {tok}")


__all__ = ["Export", "check_out", "export", "prepare", "summary", "write"]
