"""posjax.data: corpora, tokenizers, masking, TFDS builders and the grain input pipeline.

Typical use (train.py):
    tok = tokenizers.load_or_build(config, workdir)       # vocab.txt in the workdir, reused
    config.model.vocab_size = tok.vocab_size
    it = make_train_iterator(config, tok, config.seed, workdir=workdir)
    batch = next(it)                                      # dict of numpy arrays (batch contract)
    state = get_iterator_state(it)                        # JSON-able; set_iterator_state to resume
    evals = make_eval_batches(config, tok, config.train.eval_batches, workdir=workdir)
"""

from posjax.data.corpora import CORPORA, load_documents, split_documents, split_indices
from posjax.data.pipeline import (get_iterator_state, long_documents, make_eval_batches,
                                  make_train_dataset, make_train_iterator, set_iterator_state,
                                  tokenized)
from posjax.data.tokenizers import TOKENIZERS, check_vocab, load_or_build

__all__ = [
    "CORPORA", "TOKENIZERS", "check_vocab", "get_iterator_state", "load_documents", "load_or_build",
    "long_documents", "make_eval_batches", "make_train_dataset", "make_train_iterator",
    "set_iterator_state", "split_documents", "split_indices", "tokenized",
]
