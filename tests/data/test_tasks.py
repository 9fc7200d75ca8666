"""Task generators (posjax.data.tasks): seeded, the key planted exactly once at the requested
depth, masks on exactly the answer tokens, one-line errors for bad input. A hand-made
vocabulary and filler keep this instant (no corpus is read)."""

from __future__ import annotations

import numpy as np
import pytest

from posjax.data import tasks
from posjax.data.tasks import common
from posjax.data.tokenizers import SPECIALS, ChineseChars
from posjax.errors import ConfigError

CHARS = list("天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏闰余成岁律吕调阳云腾致雨露结为霜金生丽水")


def tokenizer(digits: str = "0123456789") -> ChineseChars:
    return ChineseChars(list(SPECIALS) + list(digits) + list("口令的是。") + CHARS)


@pytest.fixture(scope="module")
def tok():
    return tokenizer()


@pytest.fixture(scope="module")
def stream(tok):
    rng = np.random.default_rng(0)
    # filler with digits in it: filler_stream must take them out
    raw = rng.integers(tok.num_special, tok.vocab_size, size=5000).astype(np.int32)
    return tasks.filler_stream(raw, tasks.task_vocab(tok), tok.num_special)


def occurrences(row: np.ndarray, seq: np.ndarray) -> list[int]:
    k = len(seq)
    return [i for i in range(len(row) - k + 1) if np.array_equal(row[i:i + k], seq)]


@pytest.mark.parametrize("name", list(tasks.GENERATORS))
def test_deterministic_under_seed(tok, stream, name):
    a = tasks.generate(name, tok, stream, 96, rows_per_depth=3, seed=7)
    b = tasks.generate(name, tok, stream, 96, rows_per_depth=3, seed=7)
    c = tasks.generate(name, tok, stream, 96, rows_per_depth=3, seed=8)
    for k in a.arrays:
        np.testing.assert_array_equal(a.arrays[k], b.arrays[k])
    np.testing.assert_array_equal(a.keys, b.keys)
    assert not np.array_equal(a.arrays["input_ids"], c.arrays["input_ids"])
    # the same keys at every length: lengths differ only in the filler between
    longer = tasks.generate(name, tok, stream, 160, rows_per_depth=3, seed=7)
    np.testing.assert_array_equal(a.keys, longer.keys)


@pytest.mark.parametrize("name", list(tasks.GENERATORS))
def test_key_once_at_depth_and_masks_exactly_the_answer(tok, stream, name):
    vocab = tasks.task_vocab(tok)
    length, k = 128, tasks.DIGITS
    rows = tasks.generate(name, tok, stream, length, rows_per_depth=4, seed=1)
    ids, w = rows.arrays["input_ids"], rows.arrays["mlm_weights"]
    assert ids.shape == (20, length) and set(rows.arrays) == {
        "input_ids", "token_type_ids", "positions", "segment_ids", "mlm_targets", "mlm_weights"}
    if name == "copy_span":
        lead, size = k, 2 * k
    elif name == "passkey":
        lead, size = len(vocab.prefix), len(vocab.prefix) + k + len(vocab.end)
    else:
        lead = len(vocab.named[0]) + 1 + len(vocab.named[1])
        size = lead + k + len(vocab.end)
    room = length - 2 - (size - len(vocab.end) if name != "copy_span" else 2 * k)
    for r in range(len(ids)):
        key = rows.keys[r]
        # planted once in the input (the cue's copy is masked), where the depth says
        assert occurrences(ids[r], key) == [rows.planted[r]]
        expected = 1 + rows.depth[r] * (room - size) + lead
        assert abs(rows.planted[r] - expected) <= 1
        # the masks: exactly the answer columns, which hold [MASK] and target the key
        np.testing.assert_array_equal(np.flatnonzero(w[r]), rows.answer[r])
        np.testing.assert_array_equal(rows.arrays["mlm_targets"][r, rows.answer[r]], key)
        assert (ids[r, rows.answer[r]] == tok.mask_id).all()
        assert rows.answer[r, -1] == length - 2 and ids[r, 0] == tok.cls_id
        assert ids[r, -1] == tok.sep_id
        assert rows.distance[r] == rows.answer[r, 0] - rows.planted[r] > 0
        if name != "copy_span":  # key digits only in the statement(s): never in the filler
            statements = tasks.needle.KEYS if name == "needle" else 1
            assert np.isin(ids[r], vocab.digits).sum() == k * statements
    # depth 0 sits right after [CLS], depth 1 right before the cue
    assert rows.planted[rows.depth == 0].min() == 1 + lead
    assert (rows.planted[rows.depth == 1] == 1 + room - size + lead).all()


def test_needle_distractors(tok, stream):
    vocab = tasks.task_vocab(tok)
    rng = np.random.default_rng(3)
    for depth in tasks.DEPTHS:
        arrays, info = tasks.needle.make(vocab, stream, 80, depth, rng)
        ids = arrays["input_ids"]
        lead = len(vocab.named[0]) + 1 + len(vocab.named[1])
        starts = sorted([info["planted"], *info["distractors"]])
        assert len(starts) == tasks.needle.KEYS
        assert all(b - a >= lead + tasks.DIGITS + len(vocab.end) for a, b in zip(starts, starts[1:]))
        values = {tuple(ids[s:s + tasks.DIGITS]) for s in starts}
        assert len(values) == tasks.needle.KEYS  # distinct keys
        # the cue names the queried key's name, which no distractor has
        name = ids[info["answer"][0] - 1 - len(vocab.named[1])]
        names = [ids[s - 1 - len(vocab.named[1])] for s in starts]
        assert names.count(name) == 1 and ids[info["planted"] - 1 - len(vocab.named[1])] == name


def test_alphabet_fallbacks():
    full = tokenizer("０１２３４５６７８９")
    assert tasks.task_vocab(full).digits.tolist() == [full.token_to_id[c] for c in "０１２３４５６７８９"]
    bare = ChineseChars(list(SPECIALS) + list("口令的是。") + CHARS)
    assert tasks.task_vocab(bare).digits.tolist() == list(range(5, 15))


@pytest.mark.parametrize("call, field", [
    (lambda t, s: tasks.generate("passkey", t, s, 64, depths=[1.5]), "depth"),
    (lambda t, s: tasks.generate("passkey", t, s, 64, depths=[-0.1]), "depth"),
    (lambda t, s: tasks.generate("passkey", t, s, 12), "length"),
    (lambda t, s: tasks.generate("needle", t, s, 40), "length"),
    (lambda t, s: tasks.generate("copy_span", t, s, 21), "length"),
    (lambda t, s: tasks.generate("lookup", t, s, 64), "tasks"),
    (lambda t, s: tasks.check_fractions({"passkey": 0.7, "copy_span": 0.4}), "data.tasks"),
    (lambda t, s: tasks.check_fractions({"passkey": 0.0}), "data.tasks.passkey"),
    (lambda t, s: tasks.check_fractions({"longdoc": 0.1}), "data.tasks"),
    (lambda t, s: tasks.check_fractions("passkey"), "data.tasks"),
])
def test_bad_input_one_line(tok, stream, call, field):
    with pytest.raises(ConfigError) as e:
        call(tok, stream)
    assert e.value.field == field and "\n" not in str(e.value)


def test_fractions_ok():
    assert tasks.check_fractions({"passkey": 0.6, "copy_span": 0.4}) == {
        "passkey": 0.6, "copy_span": 0.4}
    assert tasks.check_fractions(None) == {}
    # the shortest lengths accepted are the ones the error names
    vocab = tasks.task_vocab(tokenizer())
    assert common.check_length("passkey", tasks.needed("passkey", vocab) + 2, tasks.needed(
        "passkey", vocab)) == tasks.needed("passkey", vocab) + 2


def test_wordpiece_keys_are_ascii_digit_tokens_planted_once():
    """A BERT WordPiece vocabulary (MiniLM's): keys use its ASCII digit tokens, the phrases its
    words, and number tokens of the filler ('10', '##1') are neither removed nor key digits."""
    from posjax.data.tokenizers import WordPiece

    words = ["the", "pass", "key", "is", ".", "and", "lord", "said", "unto", "moses", "of",
             *"in beginning god created heaven earth was without form void darkness".split()]
    tok = WordPiece(list(SPECIALS) + words + list("0123456789") + ["10", "##1", "##s"])
    vocab = tasks.task_vocab(tok)
    assert tok.tokens(vocab.digits) == list("0123456789")
    assert tok.tokens(vocab.prefix) == ["the", "pass", "key", "is"] and tok.tokens(vocab.end) == ["."]
    raw = np.array(tok.encode("and the lord said unto moses 10 of 7 lords 1") * 40, np.int32)
    stream = tasks.filler_stream(raw, vocab, tok.num_special)
    assert not np.isin(stream, vocab.digits).any() and np.isin(stream, tok.encode("10")).any()
    rows = tasks.generate("passkey", tok, stream, 64, rows_per_depth=2, seed=3)
    for r, ids in enumerate(rows.arrays["input_ids"]):
        p, key = rows.planted[r], rows.keys[r]
        assert np.flatnonzero(np.isin(ids, vocab.digits)).tolist() == list(range(p, p + 5))
        assert tok.tokens(ids[p - 4:p + 6]) == ["the", "pass", "key", "is", *tok.tokens(key), "."]
        np.testing.assert_array_equal(np.flatnonzero(rows.arrays["mlm_weights"][r]), rows.answer[r])
        assert tok.tokens(ids[rows.answer[r]]) == ["[MASK]"] * 5
