"""Corpus: the King James Bible (English; WordPiece tokenizer).

DeBERTa with its Enhanced Mask Decoder (He et al. 2021, sec. 3.2): relative positions
(disentangled attention) in every layer, absolute positions only in the decoder before the
MLM head: the last layer runs twice more on its own input, with queries that start as that
input + a learned absolute table. Otherwise configs/deberta.py.

    python train.py --config=configs/deberta_emd.py

emd: decoder passes (DeBERTa: 2); emd_rows: table rows (None = model.max_length). Set
emd_rows when eval.py should run the model past its training length.
"""

from configs import deberta


def get_config(arg=None):
    config = deberta.get_config(arg)
    config.position.emd = 2
    config.position.emd_rows = config.model.max_length
    return config
