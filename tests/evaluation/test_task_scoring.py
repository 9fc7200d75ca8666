"""Task scorers: an oracle that reads the planted key scores 100%; a random guesser scores
about 10^-k exact match and 1/10 per digit, inside the 95% intervals."""

from __future__ import annotations

import numpy as np

from posjax.data import tasks
from posjax.evaluation.stats import intervals
from posjax.evaluation.stats import task_scores as scoring
from tests.data.test_tasks import tokenizer


def test_oracle_reads_the_planted_key():
    tok = tokenizer()
    raw = np.random.default_rng(0).integers(tok.num_special, tok.vocab_size, 3000)
    stream = tasks.filler_stream(raw, tasks.task_vocab(tok), tok.num_special)
    for name in tasks.GENERATORS:
        rows = tasks.generate(name, tok, stream, 100, rows_per_depth=4, seed=2)
        ids = rows.arrays["input_ids"]
        k = rows.answer.shape[1]
        # the oracle reads k tokens at the planted column of the INPUT (never the targets)
        guess = np.stack([ids[r, p:p + k] for r, p in enumerate(rows.planted)])
        s = scoring.summary(scoring.from_predictions(guess, rows.arrays["mlm_targets"][
            np.arange(len(ids))[:, None], rows.answer]))
        # all correct is still a finite sample: Wilson's [0.83.., 1], never [1, 1]
        assert s["exact"] == s["exact_hi"] == 1.0 and s["interval"] == "Wilson"
        assert s["exact_lo"] == intervals.wilson(len(ids), len(ids))[1] < 1.0
        assert s["digit_accuracy"] == 1.0 and s["rows"] == len(ids)
        per_depth = scoring.by_depth(scoring.from_predictions(guess, rows.keys), rows.depth)
        assert [d["depth"] for d in per_depth] == list(tasks.DEPTHS)
        assert all(d["exact"] == 1.0 and d["rows"] == 4 for d in per_depth)
        assert all(d["exact_lo"] < 1.0 and d["digit_accuracy_interval"] ==
                   "jackknife over rows t(3)" for d in per_depth)


def test_random_guesser_scores_chance():
    rng = np.random.default_rng(5)
    for k, n in ((1, 2000), (2, 4000)):
        truth = rng.integers(0, 10, size=(n, k))
        guess = rng.integers(0, 10, size=(n, k))
        s = scoring.summary(scoring.from_predictions(guess, truth))
        assert s["exact_lo"] <= 10.0 ** -k <= s["exact_hi"]
        assert abs(s["exact"] - 10.0 ** -k) < 0.5 * 10.0 ** -k
        assert abs(s["digit_accuracy"] - 0.1) < 0.02 and s["exact_lo"] < s["exact_hi"]
    # one digit wrong is no exact match, but k-1 of k digits right
    s = scoring.summary(scoring.from_predictions([[1, 2, 3]], [[1, 2, 4]]))
    assert s["exact"] == 0.0 and abs(s["digit_accuracy"] - 2 / 3) < 1e-12


def test_twenty_of_twenty_is_wilson_not_a_point():
    s = scoring.summary({"correct": [3] * 20, "count": [3] * 20})
    assert (round(s["exact_lo"], 3), s["exact_hi"]) == (0.839, 1.0)
    assert s["digit_accuracy_interval"] == "bootstrap over rows"


def test_no_correct_token_is_not_a_zero_width_interval():
    s = scoring.summary({"correct": [0] * 20, "count": [5] * 20})
    assert s["exact_lo"] == s["digit_accuracy_lo"] == 0.0
    assert s["exact_hi"] > 0 and s["digit_accuracy_hi"] > 0
