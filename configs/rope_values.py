"""Corpus: People's Daily, January 1998 (Chinese; chinese_chars tokenizer, one token a character).

RoPE on the value path too (Su's note on RoPE): v is rotated by the key's position and the
attention output back by the query's, so out_i = sum_j p_ij R(j - i) v_j and the value path
is relative like the logits. Otherwise configs/rope.py.

    python train.py --config=configs/rope_values.py
"""

from configs import rope


def get_config(arg=None):
    config = rope.get_config(arg)
    config.position.on_values = True
    return config
