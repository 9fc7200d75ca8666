"""Every (scheme, length-extension method) pair through the two public entry points,
evaluation.methods.make_cell (eval.py) and pretrained.extended_config (Pretrained.extend),
reduced to a small JSON record: the rewritten config (its position section and a digest of
what the extension changed anywhere in it, key order included), the resolved details, the params rewrite (a digest of a fake
checkpoint's rewritten table) or the refusal.

extension_golden.json holds the records computed before the extension rules moved onto the
scheme classes (positions/*: `Scheme.extend`); test_extension_golden.py recomputes them and
requires the same records. Regenerate (only when a change of behaviour is intended, and say
which records changed and why in the commit):

    JAX_PLATFORMS=cpu python -m tests.positions.extension_cases
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os

import numpy as np

from posjax.errors import ConfigError
from posjax.evaluation import methods
from posjax.evaluation.run.restore import Run
from posjax.positions import names

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "extension_golden.json")
TABLE = ("encoder", "embeddings", "position", "tree", "table")
EVAL_METHODS = ("as_is", "none", "truncate", "hierarchical", "tile", "interpolate", "stretch",
                "new_rows", "linear", "ntk", "dynamic_ntk", "yarn", "llama3", "rerope",
                "leaky_rerope")
PRETRAINED_METHODS = (None, "none", "as_is", "hierarchical", "tile", "linear", "ntk",
                      "dynamic_ntk", "yarn", "llama3", "rerope", "bogus")


def _config_module(name: str):
    spec = importlib.util.spec_from_file_location(f"_ext_cfg_{name}",
                                                  os.path.join(REPO, "configs", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def runs() -> dict:
    """name -> a trained-run config: every registered scheme at its defaults (configs/tiny.py)
    plus the variants whose extension differs (table sizes, partial / value rotation, a
    scaled RoPE, local layers)."""
    tiny = _config_module("tiny")
    base = _config_module("base")
    out = {}
    for name in names():
        out[name] = tiny.get_config(name)

    def small(position: str, **fields):
        config = base.get_config("tiny")
        config.position = base.position(position, **fields)
        config.model.max_length = 16
        config.data.seq_len = 16
        return config

    out["learned_rows16"] = small("learned", rows=16)
    out["learned_rows24"] = small("learned", rows=24)
    out["hierarchical_rows8"] = small("hierarchical", rows=8, alpha=0.3)
    out["multiplicative_rows20"] = small("multiplicative", rows=20)
    out["rope_values"] = small("rope", on_values=True)
    out["rope_partial"] = small("rope", rotary_dim=4)
    out["rope_fraction"] = small("rope", rotary_fraction=0.5)
    out["rope_halfsplit"] = small("rope", interleaved=False, base=500000.0)
    out["rope_yarn"] = small("rope", scaling="yarn", factor=2.0, original_length=8)
    out["rope_int_base"] = small("rope", base=10000)
    modern = _config_module("modernbert").get_config("tiny")
    out["modernbert"] = modern
    for config in out.values():
        config.model.vocab_size = 100
    return out


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=False, default=repr).encode()).hexdigest()[:16]


def _array_digest(tree) -> str:
    h = hashlib.sha256()
    for key in sorted(tree):
        value = tree[key]
        if isinstance(value, dict):
            h.update(key.encode() + _array_digest(value).encode())
        else:
            a = np.asarray(value)
            h.update(f"{key}{a.shape}{a.dtype}".encode() + a.tobytes())
    return h.hexdigest()[:16]


def _fake_params(config) -> dict:
    """A checkpoint's params as far as a rewrite can touch them: the position table (rows =
    position.rows or model.max_length, width = model.hidden) when the scheme has one."""
    rows = config.position.get("rows", None) or config.model.max_length
    width = config.model.hidden
    table = (np.arange(rows * width, dtype=np.float32).reshape(rows, width) % 7) / 7.0
    return {"encoder": {"embeddings": {"position": {"tree": {"table": table}}}},
            "other": {"w": np.ones((2,), np.float32)}}


def _changed(before: dict, after: dict) -> dict:
    return {k: after.get(k, "<unset>") for k in sorted(set(before) | set(after))
            if before.get(k, "<unset>") != after.get(k, "<unset>")}


def _config_digest(before: dict, after: dict) -> str:
    """A digest of what the extension changed in the whole config (every section, key order
    included), so a new default elsewhere in the config leaves the records as they are."""
    changed = {}
    for section in sorted(set(before) | set(after)):
        a, b = before.get(section, "<unset>"), after.get(section, "<unset>")
        if isinstance(a, dict) and isinstance(b, dict):
            diff = _changed(a, b)
            if diff or list(a) != list(b):
                changed[section] = [diff, list(b)]
        elif a != b:
            changed[section] = b
    return _digest(changed)


def eval_record(config, variant, length: int, options) -> dict:
    run = Run("fake", "/nonexistent", 0, config, tokenizer=None)
    try:
        cell = methods.make_cell(run, variant, length, options)
    except methods.NotApplicable as e:
        return {"not_applicable": str(e)}
    cfg = cell.config.to_dict()
    out = {"position": cfg["position"], "model": _changed(config.model.to_dict(), cfg["model"]),
           "seq_len": cfg["data"]["seq_len"], "window": cell.window, "details": cell.details,
           "details_order": list(cell.details), "config": _config_digest(config.to_dict(), cfg)}
    if config.position.name in ("learned", "hierarchical", "multiplicative"):
        params = _fake_params(config)
        out["params"] = _array_digest(cell.rewrite(params))
    else:
        params = {"other": {"w": np.ones((2,), np.float32)}}
        out["params"] = "same" if cell.rewrite(params) is params else _array_digest(
            cell.rewrite(params))
    return out


def pretrained_record(config, length: int, method, alpha: float) -> dict:
    from posjax.pretrained import extended_config

    try:
        new = extended_config(config, length, method, alpha)
    except ConfigError as e:
        return {"error": str(e)}
    cfg = new.to_dict()
    return {"position": cfg["position"], "model": _changed(config.model.to_dict(), cfg["model"]),
            "config": _config_digest(config.to_dict(), cfg)}


def eval_cases():
    """(key, config, variant, length, options) for every run, method and setting. A method
    that does not apply to a run is recorded once (its refusal names no length)."""
    default = methods.Options()
    fixed = methods.Options(rope_factor=8.0, rerope_window=5, leaky_factor=3.0)
    for run_name, config in runs().items():
        T = int(config.data.seq_len)
        for method in EVAL_METHODS:
            if not methods.applies(method, config.position.name):
                yield f"{run_name}|{method}", config, methods.Variant(method), T, default
                continue
            variants = [methods.Variant(method), methods.Variant(method, logn=True)]
            if method == "hierarchical":
                variants.append(methods.Variant(method, alpha=0.3))
            lengths = {T, 3 * T + 1}
            if method == "hierarchical":
                lengths.add(T * T + 1)  # past n*n positions
            if method in ("as_is", "truncate"):
                lengths.add(600)  # chunked attention on CPU
            if method == "none":  # the alias of as_is
                lengths = {3 * T + 1}
            for variant in variants:
                for length in sorted(lengths if not variant.logn else {3 * T + 1}):
                    for opt_name, options in (("default", default), ("fixed", fixed)):
                        if opt_name == "fixed" and (variant.logn or method in ("as_is", "none",
                                                                               "truncate")):
                            continue
                        key = f"{run_name}|{variant.label}|{length}|{opt_name}"
                        yield key, config, variant, length, options


def pretrained_cases():
    for run_name, config in runs().items():
        L = int(config.model.max_length)
        family = config.position.name in ("learned", "hierarchical", "multiplicative", "rope")
        for method in PRETRAINED_METHODS if family else (None, "none", "hierarchical", "yarn"):
            for length in sorted({L // 2, 4 * L, L * L + 1}):
                for alpha in (0.4, 0.3):
                    if alpha != 0.4 and method not in (None, "hierarchical"):
                        continue
                    key = f"{run_name}|{method}|{length}|{alpha}"
                    yield key, config, length, method, alpha


def digest(record: dict) -> str:
    """The record's digest, with its readable head (the refusal or the new position name)."""
    head = record.get("not_applicable") or record.get("error") or record["position"]["name"]
    return f"{_digest(record)[:12]} {head[:40]}"


def compute(full: bool = False) -> dict:
    """key -> digest of each record (`full`: the records themselves, to read a difference)."""
    form = (lambda r: r) if full else digest
    return {"eval": {key: form(eval_record(c, v, n, o)) for key, c, v, n, o in eval_cases()},
            "pretrained": {key: form(pretrained_record(c, n, m, a))
                           for key, c, n, m, a in pretrained_cases()}}


if __name__ == "__main__":
    records = compute()
    with open(GOLDEN, "w") as f:
        json.dump(records, f, indent=0, sort_keys=True)
        f.write("\n")
    print(f"wrote {GOLDEN}: {len(records['eval'])} eval and {len(records['pretrained'])} "
          "pretrained records")
