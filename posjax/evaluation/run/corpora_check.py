"""One corpus per comparison: eval.py refuses to put runs trained on different corpora or
tokenizers into one table (results folder) unless --allow_mixed_corpora is given; then
results.json settings.mixed_corpora lists each run's corpus and every title says so.

A run's corpus is (data.corpus, data.path, data.tfds_name, data.tokenizer) of its training
config; the runs already in the --out folder count too, since they share its tables.
"""

from __future__ import annotations

from typing import Optional

from posjax import schema
from posjax.errors import ConfigError

FIELDS = ("corpus", "path", "tfds_name", "tokenizer")


def corpus_of(config) -> tuple:
    """(corpus, path, tfds_name, tokenizer) of a ConfigDict or a plain config dict."""
    return tuple(str(schema.given(config, f"data.{k}") or "") for k in FIELDS)


def describe(corpus: tuple) -> str:
    name, path, tfds_name, tokenizer = corpus
    where = path or tfds_name
    return f"{name}{f' {where}' if where else ''}, {tokenizer or 'default'} tokenizer"


def check_one_corpus(configs: dict, allow: bool) -> Optional[list[str]]:
    """`configs`: {run name: training config}. ConfigError when they name more than one
    corpus and `allow` is False; else None for one corpus, or the 'name: corpus' lines of
    a mixed table."""
    corpora = {name: corpus_of(cfg) for name, cfg in configs.items()}
    if len(set(corpora.values())) <= 1:
        return None
    lines = [f"{name}: {describe(c)}" for name, c in sorted(corpora.items())]
    if not allow:
        raise ConfigError("workdir", sorted(corpora), "runs trained on one corpus and "
                          "tokenizer in one table, these differ (" + "; ".join(lines) +
                          "): evaluate them into separate --out folders, or pass "
                          "--allow_mixed_corpora to compare them anyway")
    return lines
