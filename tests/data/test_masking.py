"""posjax.data.masking: BERT rates (15%, 80/10/10), specials never chosen, whole words."""

from __future__ import annotations

import numpy as np

from posjax.data import masking

VOCAB, SPECIAL, MASK = 1000, 5, 4


def _rows(num_rows: int, length: int = 128, seed: int = 0):
    """Random rows: [CLS] body [SEP] [PAD]...; random word starts (words of 1-4 tokens)."""
    rng = np.random.default_rng(seed)
    for r in range(num_rows):
        n = int(rng.integers(length // 2, length - 2))
        ids = np.zeros(length, np.int32)
        ids[0], ids[1:n + 1], ids[n + 1] = 2, rng.integers(SPECIAL, VOCAB, n), 3
        maskable = np.zeros(length, bool)
        maskable[1:n + 1] = True
        starts = np.ones(length, bool)
        starts[1:n + 1] = rng.random(n) < 0.4
        yield r, ids, starts, maskable


def _collect(whole_word: bool, num_rows: int = 400):
    chosen_total = maskable_total = 0
    kinds = np.zeros(3)  # [MASK], random, unchanged
    for r, ids, starts, maskable in _rows(num_rows):
        rng = masking.row_rng(0, 0, r)
        chosen = masking.choose(maskable, starts, rng, 0.15, whole_word)
        inputs, targets, weights = masking.corrupt(ids, chosen, rng, mask_id=MASK, vocab_size=VOCAB,
                                                   num_special=SPECIAL)
        assert not chosen[~maskable].any()  # [CLS], [SEP], [PAD] never chosen
        assert (inputs[~chosen] == ids[~chosen]).all()
        assert (targets == np.where(chosen, ids, 0)).all()
        assert (weights == chosen).all() and weights.dtype == np.float32
        assert (inputs[chosen] != MASK).sum() == 0 or (inputs[chosen] >= SPECIAL).any()
        chosen_total += chosen.sum()
        maskable_total += maskable.sum()
        changed = inputs[chosen]
        kinds += [(changed == MASK).sum(),
                  ((changed != MASK) & (changed != ids[chosen])).sum(),
                  (changed == ids[chosen]).sum()]
        if whole_word:  # every word all or nothing
            word = np.cumsum(starts | ~maskable)
            for w in np.unique(word[chosen]):
                assert chosen[(word == w) & maskable].all()
        else:
            assert chosen.sum() == max(1, round(0.15 * maskable.sum()))
    return chosen_total / maskable_total, kinds / kinds.sum()


def test_token_masking_rates():
    rate, kinds = _collect(whole_word=False)
    assert abs(rate - 0.15) < 0.005
    # ~30k chosen tokens: 80/10/10 within 1.5 points (random replacements that hit the same
    # id by chance count as unchanged: 0.1% of the 10%).
    np.testing.assert_allclose(kinds, [0.8, 0.1, 0.1], atol=0.015)


def test_whole_word_masking_rates():
    rate, kinds = _collect(whole_word=True)
    assert abs(rate - 0.15) < 0.01
    np.testing.assert_allclose(kinds, [0.8, 0.1, 0.1], atol=0.015)


def test_masks_reproducible_and_dynamic():
    _, ids, starts, maskable = next(_rows(1))
    a = masking.choose(maskable, starts, masking.row_rng(3, 0, 7), 0.15, True)
    b = masking.choose(maskable, starts, masking.row_rng(3, 0, 7), 0.15, True)
    c = masking.choose(maskable, starts, masking.row_rng(3, 1, 7), 0.15, True)
    assert (a == b).all() and (a != c).any()


def test_nothing_to_mask():
    ids = np.array([2, 3, 0, 0], np.int32)
    maskable = np.zeros(4, bool)
    inputs, targets, weights = masking.mask_row(
        ids, np.ones(4, bool), maskable, masking.row_rng(0, 0, 0), rate=0.15, whole_word=True,
        mask_id=MASK, vocab_size=VOCAB, num_special=SPECIAL)
    assert (inputs == ids).all() and not targets.any() and not weights.any()


def test_at_least_one_prediction():
    ids = np.array([2, 10, 11, 3], np.int32)
    maskable = np.array([False, True, True, False])
    starts = np.array([True, True, False, True])
    # Rate 0.5: budget round(2 * 0.5) = 1 < the 2-token word, which still fits the cap of
    # max_predictions(4, 0.5) = 2 places: the one word, whole.
    chosen = masking.choose(maskable, starts, masking.row_rng(0, 0, 0), 0.5, whole_word=True)
    assert chosen.tolist() == [False, True, True, False]
    # Rate 0.15: the cap is 1 place, so (as in BERT, whose max_predictions_per_seq bounds the
    # whole-word loop too) the row predicts nothing rather than half a word.
    chosen = masking.choose(maskable, starts, masking.row_rng(0, 0, 0), 0.15, whole_word=True)
    assert not chosen.any() and ids.size == 4


def test_max_predictions_bounds_every_row():
    # The training step gathers max_predictions(L, rate) places per row; no row may have more.
    for whole_word in (False, True):
        for _, ids, starts, maskable in _rows(200):
            for rate in (0.15, 0.3):
                chosen = masking.choose(maskable, starts, masking.row_rng(1, 0, int(ids.sum())),
                                        rate, whole_word)
                assert 1 <= chosen.sum() <= masking.max_predictions(ids.size, rate)
    assert masking.max_predictions(128, 0.15) == 19  # BERT used 20 at 128
    assert masking.max_predictions(4, 0.15) == 1 and masking.max_predictions(64, 0.0) == 0


def test_fallback_word_respects_the_cap():
    # Rate 0.15 of 8 tokens: budget and cap 1; every word is 3 tokens long, so none fits and
    # the row predicts nothing rather than more places than the step scores.
    maskable = np.array([False] + [True] * 6 + [False])
    starts = np.array([True, True, False, False, True, False, False, True])
    chosen = masking.choose(maskable, starts, masking.row_rng(0, 0, 0), 0.15, whole_word=True)
    assert not chosen.any()
    # At rate 0.4 the budget is round(6 * 0.4) = 2 but the cap round(8 * 0.4) = 3: the
    # fallback takes one whole 3-token word.
    chosen = masking.choose(maskable, starts, masking.row_rng(0, 0, 0), 0.4, whole_word=True)
    assert chosen.sum() == 3 and masking.max_predictions(8, 0.4) == 3
    assert chosen[1:4].all() or chosen[4:7].all()
