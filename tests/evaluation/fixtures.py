"""One tiny trained checkpoint shared by every evaluation test (trained once per session).

A learned-table BERT (hidden 32, 2 layers, table of 16 rows, trained at 16 tokens) for 2 steps
on 200 People's Daily articles: quality is irrelevant, the tests check plumbing and exactness.
"""

from __future__ import annotations

import functools
import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAINED = 16  # the training length (and table rows) of the tiny model


def tiny_config(position: str = "learned", **fields):
    spec = importlib.util.spec_from_file_location("_eval_base_cfg", os.path.join(REPO, "configs", "base.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config("tiny")
    if position == "learned":
        fields.setdefault("rows", TRAINED)
    config.position = module.position(position, **fields)
    config.model.max_length = TRAINED
    config.data.seq_len = TRAINED
    config.train.steps = 2
    config.train.checkpoint_every = 2
    config.train.eval_every = 0
    return config


@functools.lru_cache(maxsize=None)
def train_once(base: str, position: str = "learned") -> str:
    """Train the tiny model in `base`/tiny_<position> once per process; returns the workdir."""
    from absl import logging as absl_logging

    from posjax.training import train_and_evaluate

    absl_logging.set_verbosity(absl_logging.ERROR)
    workdir = os.path.join(base, f"tiny_{position}")
    train_and_evaluate(tiny_config(position), workdir, progress_bar=False)
    return workdir


def synthetic_config(position: str = "learned", steps: int = 400):
    """The tiny model on a synthetic language whose order is everything: a deterministic Markov
    chain (each of 16 word types has ONE successor), so a masked token is its left neighbour's
    successor, while the bag of a row's tokens leaves it ambiguous. Batch 32, no dropout and a
    high learning rate make a 16-row learned table useful within a few hundred steps (measured
    when written: reliance 0.57 at 400 steps, 0.24 at 200)."""
    import ml_collections

    config = tiny_config(position)
    d, t = config.data, config.train
    d.corpus, d.tokenizer, d.vocab_size = "synthetic", "chinese_chars", 16 + 5
    d.heldout_fraction, d.max_documents, d.batch_size = 0.1, None, 32
    d.synthetic = ml_collections.ConfigDict(dict(vocab=16, successors=1, decay=0.5, seed=0,
                                                 documents=40, doc_tokens=1024))
    config.model.dropout = 0.0
    t.steps, t.checkpoint_every, t.warmup_steps, t.log_every = steps, steps, 40, steps
    t.learning_rate = 2e-2
    return config
