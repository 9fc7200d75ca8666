"""A synthetic language in which word order is necessary, with a computable MLM ceiling.

The source is a seeded first-order Markov chain over `vocab` word types. Each type has
`successors` likely next types: the chain's matrix is a weighted sum of `successors` random
permutation matrices (weights proportional to decay**j), so it is doubly stochastic and its
stationary distribution is uniform. Every document starts from that stationary distribution,
so any window of any document, at any offset, is a stationary stretch of the chain.

Why this language:
  - Order is necessary: a token is pinned down by its neighbours (which types may precede and
    follow it), while the bag of a row's tokens says almost nothing (uniform unigrams).
  - The Bayes-optimal prediction of a masked token given the row is exact by forward-backward
    over the chain, with the masked places unobserved and [CLS]/[SEP]/[PAD] ending the chain
    (a new document, or a new packed example, starts afresh from the stationary distribution).

Word types are single Latin-1 characters, so the character tokenizer (data.tokenizer =
'chinese_chars') maps one word to one token, and CPython keeps one shared object per character:
a list of millions of them costs 8 bytes a word.

config.data.synthetic fields (all optional): vocab (64), successors (4), decay (0.5), seed (0,
the chain), documents (600), doc_tokens (8192: long enough for 8k-token windows).

BERT's corruption (80% [MASK], 10% random, 10% unchanged) is kept as it is. `bayes_accuracy`
brackets the true ceiling with two exact computations:
  - 'oracle': the Bayes predictor that also knows WHICH places were chosen for prediction. It
    has more information than any model, so its accuracy is an upper bound.
  - 'achievable': the Bayes predictor of a source in which each maskable token is chosen
    independently with probability mask_rate. It uses only the model's input, so its accuracy is
    achievable; it differs from the true optimum only in ignoring that the pipeline chooses
    exactly round(rate * n) places per row.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from posjax import schema
from posjax.errors import ConfigError

# One character per word type: printable, non-space Latin-1 (189 of them).
ALPHABET = "".join(chr(c) for c in (*range(0x21, 0x7F), *range(0xA1, 0x100)))
DEFAULTS = dict(vocab=64, successors=4, decay=0.5, seed=0, documents=600, doc_tokens=8192)
RANDOM_SHARE, KEEP_SHARE = 0.1, 0.1  # of the chosen tokens (posjax.data.masking.corrupt)


@dataclasses.dataclass(frozen=True)
class Chain:
    """The source: transition[a, b] = P(next = b | current = a); uniform stationary."""

    transition: np.ndarray  # float64 [V, V]

    @property
    def vocab(self) -> int:
        return self.transition.shape[0]

    @property
    def stationary(self) -> np.ndarray:
        return np.full(self.vocab, 1.0 / self.vocab)


def settings(config: Any) -> dict:
    """config.data.synthetic merged over DEFAULTS, checked (ConfigError names the field)."""
    data = schema.view(config).data
    given = {} if data.synthetic is None else dict(data.synthetic)
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"data.synthetic.{unknown[0]}", given[unknown[0]],
                          f"a known field (one of {', '.join(DEFAULTS)})")
    s = {**DEFAULTS, **given}
    for name, low in (("vocab", 2), ("successors", 1), ("documents", 1), ("doc_tokens", 1),
                      ("seed", 0)):
        v = s[name]
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ConfigError(f"data.synthetic.{name}", v, f"an int >= {low}")
    if s["vocab"] > len(ALPHABET):
        raise ConfigError("data.synthetic.vocab", s["vocab"], f"an int in [2, {len(ALPHABET)}]")
    if s["successors"] > s["vocab"]:
        raise ConfigError("data.synthetic.successors", s["successors"],
                          f"an int in [1, data.synthetic.vocab={s['vocab']}]")
    decay = s["decay"]
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay <= 1:
        raise ConfigError("data.synthetic.decay", decay, "a float in (0, 1]")
    tok = data.tokenizer
    if tok != "chinese_chars":
        raise ConfigError("data.tokenizer", tok,
                          "'chinese_chars' with data.corpus='synthetic' (one token per word type)")
    return s


def fingerprint(config: Any) -> str:
    """The settings as a string, for cache keys (a new chain must never reuse old tokens)."""
    return json.dumps(settings(config), sort_keys=True)


def make_chain(vocab: int, successors: int, decay: float, seed: int) -> Chain:
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0]))
    weights = decay ** np.arange(successors)
    weights /= weights.sum()
    transition = np.zeros((vocab, vocab))
    rows = np.arange(vocab)
    for w in weights:
        # A permutation gives every type one successor and one predecessor: the sum stays
        # doubly stochastic (uniform stationary distribution) even where permutations collide.
        transition[rows, rng.permutation(vocab)] += w
    return Chain(transition)


def chain_of(config: Any) -> Chain:
    s = settings(config)
    return make_chain(s["vocab"], s["successors"], s["decay"], s["seed"])


def sample(chain: Chain, num_docs: int, length: int, seed: int, first_doc: int = 0) -> np.ndarray:
    """int [num_docs, length] state sequences; document d depends only on (seed, d), not on
    how many documents are drawn (so adding documents never changes the old ones)."""
    uniforms = np.stack([np.random.default_rng(np.random.SeedSequence([int(seed), 1, first_doc + d]))
                         .random(length) for d in range(num_docs)])
    cdf = np.cumsum(chain.transition, axis=1)
    cdf[:, -1] = 1.0  # float round-off must never let a uniform fall past the last state
    start = np.cumsum(chain.stationary)
    start[-1] = 1.0
    states = np.empty((num_docs, length), np.int64)
    states[:, 0] = np.searchsorted(start, uniforms[:, 0], side="right")
    for t in range(1, length):  # sequential in t, vectorised over documents
        states[:, t] = (cdf[states[:, t - 1]] <= uniforms[:, t, None]).sum(axis=1)
    return states


def documents(config: Any) -> list[list[str]]:
    """The corpus: `documents` documents of `doc_tokens` words (one character each)."""
    s = settings(config)
    states = sample(chain_of(config), s["documents"], s["doc_tokens"], s["seed"])
    codes = np.frombuffer(ALPHABET.encode("latin-1"), np.uint8)
    return [list(codes[row].tobytes().decode("latin-1")) for row in states]


def state_of_token(tokenizer, vocab: int) -> np.ndarray:
    """int [tokenizer.vocab_size]: the chain state of each token id, -1 for other tokens."""
    index = {c: i for i, c in enumerate(ALPHABET[:vocab])}
    return np.array([index.get(t, -1) for t in tokenizer.vocab], np.int64)


# -- the Bayes-optimal predictor ------------------------------------------------------------


def posteriors(chain: Chain, states: np.ndarray, observed: np.ndarray, chosen: np.ndarray,
               scored: np.ndarray, boundary: np.ndarray, *, rate: float, know_chosen: bool,
               num_random: int) -> np.ndarray:
    """P(x_i = s | the row's input [, which places were chosen]) for every place, [R, L, V].

    states: int [R, L] the observed token's chain state (-1 for [MASK] and specials);
    observed: bool [R, L] the input shows a word (not [MASK], not a special);
    chosen: bool [R, L] the places chosen for prediction (read only when know_chosen);
    scored: bool [R, L] the places whose prediction counts: there the posterior is
    conditioned on the place's being chosen; boundary: bool [R, L] [CLS]/[SEP]/[PAD].
    Random replacements are uniform over `num_random` word ids.
    """
    R, L = states.shape
    V = chain.vocab
    T, pi = chain.transition, chain.stationary
    onehot = np.zeros((R, L, V))
    np.put_along_axis(onehot, np.maximum(states, 0)[..., None], 1.0, axis=-1)
    # Emission of a shown word o given the true state s, for a chosen place: kept (prob KEEP
    # of the chosen) or replaced by a uniform random word (which may equal s).
    keep = KEEP_SHARE / (KEEP_SHARE + RANDOM_SHARE)
    e_chosen = np.where(observed[..., None], keep * onehot + (1 - keep) / num_random, 1.0)
    if know_chosen:
        # unchosen places show the truth ([MASK] is never unchosen; kept unobserved anyway)
        emit = np.where(chosen[..., None], e_chosen, np.where(observed[..., None], onehot, 1.0))
    else:
        # P(shown o | s) = (1 - rate) [o = s] + rate (KEEP [o = s] + RANDOM / num_random);
        # a shown [MASK] has the same probability, rate * 0.8, whatever s is.
        e_any = (1 - rate + rate * KEEP_SHARE) * onehot + rate * RANDOM_SHARE / num_random
        emit = np.where(observed[..., None], e_any, 1.0)
    emit = np.where(boundary[..., None], 1.0, emit)
    # prior[t] = P(x_t | inputs before t) (forward, before t's own emission); after[t] =
    # P(inputs after t | x_t) up to a constant. A boundary restarts the chain at pi.
    prior = np.empty((R, L, V))
    alpha = np.tile(pi, (R, 1))
    for t in range(L):
        restart = (boundary[:, t - 1] if t else np.ones(R, bool))[:, None]
        p = np.where(restart, pi, alpha @ T)
        prior[:, t] = p
        a = p * emit[:, t]
        alpha = a / a.sum(-1, keepdims=True)
    after = np.empty((R, L, V))
    beta = np.ones((R, V))
    after[:, L - 1] = beta
    for t in range(L - 2, -1, -1):
        b = (emit[:, t + 1] * beta) @ T.T
        b = np.where(boundary[:, t + 1, None], 1.0, b)
        beta = b / b.sum(-1, keepdims=True)
        after[:, t] = beta
    here = np.where(scored[..., None], e_chosen, emit)
    post = prior * after * here
    total = post.sum(-1, keepdims=True)
    return post / np.where(total > 0, total, 1.0)


def bayes_accuracy(rows: dict, chain: Chain, state_of: np.ndarray, *, rate: float,
                   mask_id: int, special_ids, know_chosen: bool,
                   chosen: np.ndarray | None = None) -> dict:
    """Bayes-optimal MLM scores on rows of the batch contract (input_ids, mlm_targets,
    mlm_weights): {'correct' [R], 'count' [R], 'loss' [R] (summed -log p of the targets),
    'accuracy'}. `state_of` maps token ids to chain states (state_of_token). `chosen`: every
    place chosen for prediction (default: the scored ones, mlm_weights > 0; rows that re-read
    context scored by another row hold chosen places that are not scored). Per-row sums, so a
    caller can bootstrap over rows."""
    ids = np.asarray(rows["input_ids"])
    weights = np.asarray(rows["mlm_weights"]) > 0
    targets = np.asarray(rows["mlm_targets"])
    special = np.isin(ids, list(special_ids))
    boundary = special & (ids != mask_id)
    states = np.where(special, -1, state_of[ids])
    if np.any(~special & (states < 0)):
        raise ConfigError("rows.input_ids", "a token outside the chain",
                          "rows of the synthetic corpus (word ids and special ids only)")
    num_random = int(np.sum(state_of >= 0))
    chosen = weights if chosen is None else np.asarray(chosen, bool) | weights
    post = posteriors(chain, states, states >= 0, chosen, weights, boundary, rate=rate,
                      know_chosen=know_chosen, num_random=num_random)
    target_states = state_of[targets]
    correct = (post.argmax(-1) == target_states) & weights
    p_target = np.take_along_axis(post, np.maximum(target_states, 0)[..., None], -1)[..., 0]
    loss = np.where(weights, -np.log(np.maximum(p_target, 1e-300)), 0.0)
    count = weights.sum(1)
    return {"correct": correct.sum(1), "count": count, "loss": loss.sum(1),
            "accuracy": float(correct.sum() / max(count.sum(), 1))}


def bag_bound(rows: dict) -> dict:
    """An upper bound on the MLM accuracy of ANY model without positions (NoPE).

    A permutation-equivariant encoder gives the same output at two places of a segment that
    show the same input token, so at best it predicts, for each group (row, segment, shown
    token), the group's most frequent target. Segments are the attention segments
    (segment_ids; the evaluator's rows are one segment, [SEP] between documents included).
    """
    ids = np.asarray(rows["input_ids"])
    weights = np.asarray(rows["mlm_weights"]) > 0
    targets = np.asarray(rows["mlm_targets"])
    segments = np.asarray(rows.get("segment_ids", np.ones_like(ids)))
    correct = np.zeros(ids.shape[0], np.int64)
    for r in range(ids.shape[0]):
        groups: dict = {}
        for i in np.flatnonzero(weights[r]):
            key = (int(segments[r, i]), int(ids[r, i]))
            counts = groups.setdefault(key, {})
            counts[int(targets[r, i])] = counts.get(int(targets[r, i]), 0) + 1
        correct[r] = sum(max(c.values()) for c in groups.values())
    count = weights.sum(1)
    return {"correct": correct, "count": count, "accuracy": float(correct.sum() / max(count.sum(), 1))}
