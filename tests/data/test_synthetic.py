"""posjax.data.synthetic: the seeded Markov language and its exact Bayes-optimal MLM ceiling."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from posjax.data import corpora, pipeline, synthetic
from posjax.errors import ConfigError

MASK, CLS, SEP = 4, 2, 3


def synth_config(make_config, **fields):
    settings = dict(vocab=8, successors=2, decay=0.5, seed=3, documents=6, doc_tokens=300)
    settings.update(fields)
    return make_config(corpus="synthetic", vocab_size=13, max_documents=None, synthetic=settings)


def test_generator_is_deterministic_and_stationary(make_config):
    a = corpora.load_documents(synth_config(make_config))
    assert a == corpora.load_documents(synth_config(make_config))
    assert len(a) == 6 and all(len(d) == 300 for d in a)
    assert a != corpora.load_documents(synth_config(make_config, seed=4))
    # Document d depends on (seed, d) only: more documents leave the first ones as they were.
    assert corpora.load_documents(synth_config(make_config, documents=8))[:6] == a
    chain = synthetic.make_chain(8, 2, 0.5, 3)
    np.testing.assert_allclose(chain.transition.sum(0), 1.0)  # doubly stochastic
    np.testing.assert_allclose(chain.transition.sum(1), 1.0)
    # Every observed transition is one the chain allows.
    index = {c: i for i, c in enumerate(synthetic.ALPHABET)}
    s = np.array([index[w] for w in a[0]])
    assert np.all(chain.transition[s[:-1], s[1:]] > 0)


def test_bad_settings_name_the_field(make_config):
    with pytest.raises(ConfigError, match="data.synthetic.successors"):
        synthetic.settings(synth_config(make_config, successors=9))
    with pytest.raises(ConfigError, match="data.synthetic.colour"):
        synthetic.settings(synth_config(make_config, colour=1))
    with pytest.raises(ConfigError, match="data.tokenizer"):
        synthetic.settings(make_config(corpus="synthetic", tokenizer="wordpiece"))
    # Another chain never reuses cached tokens of the first.
    key = lambda c: pipeline._cache_key(c, type("T", (), {"name": "t", "fingerprint": lambda s: "f"})(), "train")  # noqa: E731
    assert key(synth_config(make_config)) != key(synth_config(make_config, seed=4))


def _brute(chain, states, chosen, scored, boundary, rate, know_chosen, num_random):
    """P(x_i | input) at each chosen place by enumerating every hidden sequence."""
    L, V = len(states), chain.vocab
    T, pi = chain.transition, chain.stationary
    keep = synthetic.KEEP_SHARE
    rand = synthetic.RANDOM_SHARE

    def emit(t, s, chosen_here):
        o = states[t]
        if chosen_here:  # P(shown | s, chosen), up to a constant
            return 0.8 if o < 0 else keep * (o == s) + rand / num_random
        if know_chosen:
            return float(o == s)
        return 0.8 * rate if o < 0 else (1 - rate) * (o == s) + rate * (keep * (o == s) + rand / num_random)

    hidden = [t for t in range(L) if not boundary[t]]
    out = {}
    for i in np.flatnonzero(scored):
        post = np.zeros(V)
        for xs in itertools.product(range(V), repeat=len(hidden)):
            x = dict(zip(hidden, xs))
            p = 1.0
            for t in hidden:
                p *= pi[x[t]] if t == 0 or boundary[t - 1] else T[x[t - 1], x[t]]
                p *= emit(t, x[t], chosen[t] and (know_chosen or t == i))
            post[x[i]] += p
        out[i] = post / post.sum()
    return out


@pytest.mark.parametrize("know_chosen", [True, False])
@pytest.mark.parametrize("score_all", [True, False])
def test_forward_backward_matches_brute_force(know_chosen, score_all):
    chain = synthetic.make_chain(3, 2, 0.6, 1)
    chain = synthetic.Chain(0.7 * chain.transition + 0.3 / 3)  # no zeros: every path counts
    # [CLS] w [MASK] w(random) [SEP] [MASK] w w [SEP]: a boundary inside the row, chosen places
    # shown as [MASK], as a (random) word and as themselves.
    states = np.array([-1, 0, -1, 2, -1, -1, 1, 1, -1])
    boundary = np.array([1, 0, 0, 0, 1, 0, 0, 0, 1], bool)
    chosen = np.array([0, 0, 1, 1, 0, 1, 0, 1, 0], bool)
    # A row that re-reads context scored by another row: a chosen [MASK] it does not score.
    scored = chosen if score_all else chosen & (np.arange(9) != 2)
    post = synthetic.posteriors(chain, states[None], (states >= 0)[None], chosen[None],
                                scored[None], boundary[None], rate=0.15,
                                know_chosen=know_chosen, num_random=3)
    brute = _brute(chain, states, chosen, scored, boundary, 0.15, know_chosen, 3)
    assert len(brute) == int(scored.sum())
    for i, p in brute.items():
        np.testing.assert_allclose(post[0, i], p, rtol=1e-10, atol=1e-12)


def test_bayes_accuracy_and_bag_bound_on_rows():
    chain = synthetic.make_chain(4, 1, 1.0, 0)  # deterministic successor: the chain is a cycle
    succ = chain.transition.argmax(1)
    seq = [0]
    for _ in range(5):
        seq.append(int(succ[seq[-1]]))
    state_of = np.array([-1] * 5 + [0, 1, 2, 3])  # token id 5 + s is state s
    ids = np.array([CLS] + [5 + s for s in seq] + [SEP])
    inputs = ids.copy()
    inputs[[2, 4]] = MASK
    weights = np.zeros(ids.size, np.float32)
    weights[[2, 4]] = 1
    rows = {"input_ids": inputs[None], "mlm_targets": np.where(weights > 0, ids, 0)[None],
            "mlm_weights": weights[None]}
    for know in (True, False):
        r = synthetic.bayes_accuracy(rows, chain, state_of, rate=0.15, mask_id=MASK,
                                     special_ids=range(5), know_chosen=know)
        assert r["accuracy"] == 1.0 and r["loss"][0] < 1e-6
    # Two [MASK]s: without positions a model gives both the same answer.
    assert synthetic.bag_bound(rows)["accuracy"] == (1.0 if seq[1] == seq[3] else 0.5)
