"""Tokenizers: Chinese characters (NEZHA / BERT-Chinese style) and WordPiece (BERT style).

Both share one interface:
  encode_document(words) -> (ids int32 [n], word_starts bool [n])
      word_starts[i] is True where token i begins a word: whole-word masking groups a start
      with the non-starts that follow it.
  encode(text) -> list[int];  decode(ids) -> str;  tokens(ids) -> list[str]
  pad_id, unk_id, cls_id, sep_id, mask_id, num_special, vocab_size, vocab (list of tokens)
The vocabulary is a BERT vocab.txt (one token a line, id = line number), saved in the workdir
by `load_or_build` and reused when present, so a resumed run sees the same ids.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Iterable, Sequence

import numpy as np
from tokenizers import (BertWordPieceTokenizer, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers)

from posjax import schema, storage
from posjax.data import algorithmic, corpora, patches
from posjax.errors import ConfigError

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZERS = schema.TOKENIZERS
VOCAB_FILE = "vocab.txt"

log = logging.getLogger(__name__)


class _Base:
    name = "base"

    def __init__(self, vocab: Sequence[str]):
        vocab = list(vocab)
        if tuple(vocab[: len(SPECIALS)]) != SPECIALS:
            raise ConfigError(
                "vocab", vocab[: len(SPECIALS)], f"a vocabulary starting with {', '.join(SPECIALS)}"
            )
        self.vocab = vocab
        self.token_to_id = {t: i for i, t in enumerate(vocab)}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = range(len(SPECIALS))
        self.num_special = len(SPECIALS)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def special_ids(self) -> tuple[int, ...]:
        return tuple(range(self.num_special))

    def tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.vocab[int(i)] for i in ids]

    def save(self, path: str) -> None:
        """Write vocab.txt (BERT format) atomically, so a crash never leaves half a vocabulary."""
        storage.write_text(path, "\n".join(self.vocab) + "\n")

    def fingerprint(self) -> str:
        """A short hash of the vocabulary, for cache keys."""
        return hashlib.blake2b("\n".join(self.vocab).encode(), digest_size=8).hexdigest()

    def encode_documents(self, docs: Sequence[Sequence[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        return [self.encode_document(d) for d in docs]


class ChineseChars(_Base):
    """One token per character; words of the corpus give the whole-word groups.

    Like NEZHA / BERT-Chinese the vocabulary is characters (plus the specials). Words longer than
    `max_word_chars` are treated as runs of one-character words: unsegmented text read from a
    text_dir arrives as whitespace-delimited sentences, and masking a whole sentence as one
    "word" would be wrong, while real People's Daily words are almost all shorter.
    """

    name = "chinese_chars"
    max_word_chars = 8

    def __init__(self, vocab: Sequence[str]):
        super().__init__(vocab)
        # id by code point for `_ids`, up to the largest one-character token (People's Daily:
        # fullwidth punctuation near U+FFxx, a 256 KiB table), unk elsewhere
        singles = {ord(t): i for t, i in self.token_to_id.items() if len(t) == 1}
        self._by_code = np.full(max(singles, default=0) + 1, self.unk_id, np.int32)
        self._by_code[list(singles)] = list(singles.values())

    @classmethod
    def train(cls, docs: Iterable[Sequence[str]], vocab_size: int) -> "ChineseChars":
        text = "".join(w for words in docs for w in words)
        codes, counts = np.unique(np.frombuffer(text.encode("utf-32-le", "surrogatepass"),
                                                np.uint32), return_counts=True)
        # Frequency order, ties broken by the character (np.unique sorts by code point, and a
        # stable sort keeps that order within a count) so the vocabulary is deterministic.
        order = np.argsort(-counts, kind="stable")
        chars = [chr(c) for c in codes[order].tolist()]
        chars = [c for c in chars if c not in SPECIALS and not c.isspace()]
        return cls(list(SPECIALS) + chars[: max(0, vocab_size - len(SPECIALS))])

    def encode_document(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = self._ids("".join(words))
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        first = np.cumsum(lengths) - lengths
        starts = np.zeros(len(ids), dtype=bool)
        starts[first[first < len(ids)]] = True  # an empty last word starts past the end
        starts |= np.repeat(lengths > self.max_word_chars, lengths)
        return ids, starts

    def _ids(self, text: str) -> np.ndarray:
        """int32 id of every character of `text` (unk where the vocabulary has none), from one
        table lookup: a Python call per character cost ~0.6 s of every start on People's
        Daily's 1.8M characters."""
        # one uint32 per code point; surrogatepass: a lone surrogate is a code point like others
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
        table = self._by_code
        ids = table[np.minimum(codes, len(table) - 1)]
        ids[codes >= len(table)] = self.unk_id
        return ids

    def encode(self, text: str) -> list[int]:
        get, unk = self.token_to_id.get, self.unk_id
        return [get(c, unk) for c in text if not c.isspace()]

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.vocab[int(i)] for i in ids if int(i) != self.pad_id)


class WordPiece(_Base):
    """BERT WordPiece (lowercase, accents stripped) through the Rust `tokenizers` library."""

    name = "wordpiece"

    def __init__(self, vocab: Sequence[str]):
        super().__init__(vocab)
        tok = Tokenizer(models.WordPiece(self.token_to_id, unk_token="[UNK]", max_input_chars_per_word=100))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True,
                                                    clean_text=True, handle_chinese_chars=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
        self._tok = tok
        self._continuation = np.array([t.startswith("##") for t in self.vocab], dtype=bool)

    @classmethod
    def train(cls, docs: Iterable[Sequence[str]], vocab_size: int) -> "WordPiece":
        trainer = BertWordPieceTokenizer(lowercase=True, strip_accents=True, clean_text=True,
                                         handle_chinese_chars=True)
        trainer.train_from_iterator(
            (" ".join(words) for words in docs), vocab_size=vocab_size, min_frequency=2,
            special_tokens=list(SPECIALS), show_progress=False,
        )
        vocab = sorted(trainer.get_vocab().items(), key=lambda kv: kv[1])
        return cls([t for t, _ in vocab])

    def _starts(self, ids: np.ndarray) -> np.ndarray:
        # '##' pieces continue the previous word; every other token starts one.
        return ~self._continuation[ids]

    def encode_document(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(self._tok.encode(" ".join(words), add_special_tokens=False).ids, np.int32)
        return ids, self._starts(ids)

    def encode_documents(self, docs: Sequence[Sequence[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        # encode_batch runs in parallel in Rust.
        out = self._tok.encode_batch([" ".join(w) for w in docs], add_special_tokens=False)
        result = []
        for enc in out:
            ids = np.asarray(enc.ids, np.int32)
            result.append((ids, self._starts(ids)))
        return result

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False).replace(" [PAD]", "")


class PatchCodes(_Base):
    """Quantized image patches (data.corpus='patches'): the specials, then one token per patch
    code. The vocabulary follows from config.data.patches (posjax.data.patches), not text."""

    name = "patch_codes"

    @classmethod
    def from_config(cls, config: Any) -> "PatchCodes":
        return cls(list(SPECIALS) + patches.code_names(patches.settings(config)))


class TaskSymbols(_Base):
    """An algorithmic task's symbols (data.corpus='algorithmic'): the specials (unused), then
    one token per input symbol, then the empty token that fills the output places
    (posjax.data.tape). The vocabulary follows from config.data.task."""

    name = "task_symbols"

    @classmethod
    def from_config(cls, config: Any) -> "TaskSymbols":
        task = algorithmic.get(_cfg(config, "task"))
        return cls(list(SPECIALS) + [f"[S{i}]" for i in range(task.input_size)] + ["[EMPTY]"])


_CLASSES = {"chinese_chars": ChineseChars, "wordpiece": WordPiece, "patch_codes": PatchCodes,
            "task_symbols": TaskSymbols}


def _cfg(config: Any, name: str):
    """config.data.<name> of the schema view (the declared default where the config lacks it)."""
    return schema.view(config).data[name]


def tokenizer_class(name: str):
    if name not in _CLASSES:
        raise ConfigError("data.tokenizer", name, f"one of {', '.join(TOKENIZERS)}")
    return _CLASSES[name]


def read_vocab(path: str) -> list[str]:
    """The tokens of a vocab.txt (one per line). A file that is not UTF-8 text (overwritten,
    or not a vocabulary at all) is a ConfigError naming it, not a UnicodeDecodeError."""
    raw = storage.read_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError("vocab.txt", path, f"UTF-8 text, one token per line (byte {e.start} "
                          "is not UTF-8: the file is damaged; restore it or start a new "
                          "workdir)") from None
    if "\x00" in text:
        raise ConfigError("vocab.txt", path, "text, one token per line (it holds NUL bytes: the "
                          "file is damaged; restore it or start a new workdir)")
    # (as text mode read it before: universal newlines)
    return [line for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if line]


def load(name: str, path: str):
    """A tokenizer of kind `name` from a BERT vocab.txt."""
    return tokenizer_class(name)(read_vocab(path))


def build(config: Any):
    """Train the tokenizer named by config.data.tokenizer on the TRAINING split only."""
    cls = tokenizer_class(_cfg(config, "tokenizer"))
    if hasattr(cls, "from_config"):  # a vocabulary the data settings define (patch codes)
        return cls.from_config(config)
    vocab_size = int(_cfg(config, "vocab_size") or 0)  # None: not set
    if vocab_size <= len(SPECIALS):
        raise ConfigError("data.vocab_size", vocab_size, f"an int > {len(SPECIALS)}")
    return cls.train(corpora.split_documents(config, "train"), vocab_size)


def load_or_build(config: Any, workdir: str | None):
    """Reuse `workdir/vocab.txt` when present; otherwise build it and save it there.

    Reuse is what keeps ids stable across restarts (a rebuilt vocabulary could reorder ties).
    """
    name = _cfg(config, "tokenizer")
    cls = tokenizer_class(name)
    path = storage.join(workdir, VOCAB_FILE) if workdir else None
    if path and storage.exists(path):
        tok = cls(read_vocab(path))
        log.info("reusing %s (%d tokens)", path, tok.vocab_size)
        return tok
    tok = build(config)
    if path:
        tok.save(path)
        log.info("wrote %s (%d tokens)", path, tok.vocab_size)
    return tok


def check_vocab(tokenizer, expected_size: int, expected_fingerprint: str | None = None) -> None:
    """ConfigError unless the tokenizer matches what a checkpoint was trained with."""
    if tokenizer.vocab_size != expected_size:
        raise ConfigError(
            "vocab.txt", f"{tokenizer.vocab_size} tokens",
            f"the {expected_size} tokens the checkpoint was trained with (delete or restore the "
            "workdir's vocab.txt to match the checkpoint)",
        )
    if expected_fingerprint is not None and tokenizer.fingerprint() != expected_fingerprint:
        raise ConfigError(
            "vocab.txt", f"fingerprint {tokenizer.fingerprint()}",
            f"the checkpoint's vocabulary (fingerprint {expected_fingerprint}); same size, other tokens",
        )
