"""Pretrained encoders: load a posjax workdir or a Hugging Face directory, encode, extend.

    import posjax.pretrained as pretrained
    model = pretrained.load("path/to/hf_dir_or_workdir")
    ids, mask = model.tokenize(["a sentence", "another one"])
    hidden = model.encode(ids, mask)                    # [B, L, hidden] numpy float32
    logits = model.mlm_logits(ids, mask)                # [B, L, vocab]
    long = model.extend(8192)                           # learned -> hierarchical (alpha 0.4)
    long.encode(long_ids)                               # chunked attention past 1024 tokens
    model.save("workdir")                               # a posjax workdir train.py can resume

Ids are POSJAX ids (the vocabulary of `model.tokenizer`, specials first); `hf_to_posjax(ids)`
maps token ids produced by the Hugging Face tokenizer of the original model.

Positions are numbered as training numbered them: 0 .. L-1 for 1-D schemes (raster order
r * g + c for a 1-D scheme trained on image patches), and (row, column) pairs [B, L, 2] for a
2-D scheme (rope2d), read off a grid of patches in raster order: a square g x g when
L = g * g, or `grid=(rows, columns)` with rows * columns = L.

`extend(max_length, method=...)` takes the scheme's own length-extension methods
(`Scheme.extend`; `python -m posjax list` prints them per scheme), with the scheme's default:
  learned      'hierarchical' (Su's decomposition of the same table; rows < n unchanged, reaches
               n*n positions; alpha in (0, 1), not 0.5), or 'tile', 'interpolate', 'stretch',
               'new_rows' (a table of max_length rows made from the trained one)
  rope         'dynamic_ntk' (default: unchanged up to the original length), or 'linear', 'ntk',
               'yarn', 'llama3' (factor = max_length / original length; these change short
               inputs too, by design), 'rerope', 'leaky_rerope', or 'none' (plain extrapolation)
  every other  'none' (e.g. nezha's clipped distances, deberta's log buckets, rope2d's angles
               linear in (row, column): nothing to extend)
"""

from posjax.convert.pretrained import Pretrained, extended_config, load, mean_pool

__all__ = ["Pretrained", "extended_config", "load", "mean_pool"]
