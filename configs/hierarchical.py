"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

Hierarchical decomposition (Su, bert4keras): a BERT learned table of n rows, trained at the
data length n, stretched to n*n positions for evaluation: positions < n use the table as is,
positions k >= n use a*u[k // n] + (1-a)*u[k % n] (a = 0.4).

position.rows = data.seq_len (the table is trained at full length), model.max_length = rows**2
(the longest input the model then supports).
"""

from posjax.config import defaults


def get_config(arg=None):
    config = defaults.get_config(arg)
    rows = config.data.seq_len
    config.model.max_length = rows * rows
    config.position = defaults.position("hierarchical", rows=rows, alpha=0.4)
    return config
