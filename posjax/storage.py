"""Workdir storage: every file posjax writes or reads in a workdir goes through here.

Paths are `etils.epath` paths, so a workdir may be local (`/ckpt/run`, `runs/a`) or on a
filesystem named by a URI (`gs://bucket/run` on Cloud Storage, through fsspec + gcsfs; orbax
uses the same epath for its checkpoints, and TensorStore's own GCS driver for the arrays).
Nothing here calls `open()` or `os.path` on a workdir path.

Two things differ on object stores and are handled here once:
- atomic replace: local files are written to a temporary name and renamed (a crash never
  leaves half a config.json); an object store commits an object only when its upload
  completes, so the file is written in place (a rename there is a copy plus a delete).
- append: object stores cannot append; `append_text` rewrites the whole object (metrics.jsonl
  grows by one line per logged step, so this stays small).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from typing import Iterator, Union

from etils import epath

try:  # fsspec's live table of the filesystems it has imported or been given (no public name)
    from fsspec.registry import _registry as _FSSPEC_REGISTERED
except ImportError:  # pragma: no cover - a future fsspec without it: assume none
    _FSSPEC_REGISTERED = None

from posjax.errors import ConfigError

PathLike = Union[str, os.PathLike]

_URI = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")

# What each URI scheme needs installed, for the one-line error: (modules, pip packages). epath
# reaches gs/s3/az/hf through fsspec's implementation of each; for gs:// orbax also asks
# google-cloud-storage about the bucket (gcsfs depends on it; named anyway).
_NEEDS = {"gs": (("gcsfs", "google.cloud.storage"), "gcsfs google-cloud-storage"),
          "s3": (("s3fs",), "s3fs"), "az": (("adlfs",), "adlfs"),
          "hf": (("huggingface_hub",), "huggingface_hub")}


def scheme(path: PathLike) -> str | None:
    """'gs' for gs://bucket/x, None for a local path."""
    m = _URI.match(os.fspath(path))
    return m.group(1).lower() if m else None


def is_local(path: PathLike) -> bool:
    return scheme(path) is None


def path(p: PathLike) -> epath.Path:
    """An epath.Path; a local path is made absolute (what the rest of posjax stores and
    prints), a URI is kept as given."""
    s = os.fspath(p)
    if is_local(s):
        return epath.Path(os.path.abspath(s))
    return epath.Path(s)


def join(p: PathLike, *parts: str) -> str:
    """`p/part/...` as a string (URIs keep their `scheme://`)."""
    return os.fspath(path(p).joinpath(*parts))


def check_filesystem(p: PathLike, field: str = "workdir") -> None:
    """ConfigError (one line: what to install) when `p` names a filesystem this machine cannot
    reach: a scheme epath does not know, or gs:// without gcsfs. Call it before writing
    anything. A filesystem registered with fsspec under the scheme (tests) counts as there."""
    name = scheme(p)
    if name is None:
        return
    if name not in _NEEDS:
        raise ConfigError(field, os.fspath(p), "a local path or a gs://, s3://, az:// or hf:// URI")
    modules, packages = _NEEDS[name]
    fs_ok = _fsspec_knows(name) or _installed(modules[0])
    if name == "gs" and _installed("tensorflow"):
        fs_ok = True  # epath reads gs:// through tf.io.gfile when TensorFlow is installed
    if fs_ok and all(_installed(m) for m in modules[1:]):
        return
    raise ConfigError(field, os.fspath(p), f"a {name}:// path this machine can write: install "
                      f"its filesystem packages first (pip install {packages})")


def _installed(module: str) -> bool:
    if module in sys.modules:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package
        return False


def _fsspec_knows(name: str) -> bool:
    """True when fsspec has an implementation of `name` already imported or registered by
    code (not merely listed in fsspec's table of optional packages)."""
    if _FSSPEC_REGISTERED is None:
        return False
    return name in _FSSPEC_REGISTERED or ("gcs" in _FSSPEC_REGISTERED and name == "gs")


# -- reading ----------------------------------------------------------------------------------


def exists(p: PathLike) -> bool:
    return path(p).exists()


def isdir(p: PathLike) -> bool:
    return path(p).is_dir()


def isfile(p: PathLike) -> bool:
    q = path(p)
    return q.exists() and not q.is_dir()


def listdir(p: PathLike) -> list[str]:
    """Names in a directory ([] when it does not exist)."""
    q = path(p)
    if not q.is_dir():
        return []
    return sorted(c.name for c in q.iterdir())


def read_text(p: PathLike) -> str:
    return path(p).read_text(encoding="utf-8")


def read_bytes(p: PathLike) -> bytes:
    return path(p).read_bytes()


def size(p: PathLike) -> int:
    return int(path(p).stat().length)


def walk_files(p: PathLike) -> Iterator[str]:
    """Every file below directory `p` (full paths). Built on iterdir, which keeps the URI
    scheme (fsspec's own walk gives bucket paths without it)."""
    for child in path(p).iterdir():
        if child.is_dir():
            yield from walk_files(child)
        else:
            yield os.fspath(child)


# -- writing ----------------------------------------------------------------------------------


def makedirs(p: PathLike) -> None:
    path(p).mkdir(parents=True, exist_ok=True)


def write_bytes(p: PathLike, data: bytes) -> None:
    """Write a whole file so that a reader never sees half of it (see the module doc)."""
    q = path(p)
    q.parent.mkdir(parents=True, exist_ok=True)
    if not is_local(q):
        q.write_bytes(data)
        return
    tmp = q.parent / f".{q.name}.tmp{os.getpid()}"
    tmp.write_bytes(data)
    tmp.replace(q)


def write_text(p: PathLike, text: str) -> None:
    write_bytes(p, text.encode("utf-8"))


def append_text(p: PathLike, text: str) -> None:
    """Append to a file (created if missing). Object stores: read and rewrite (module doc)."""
    q = path(p)
    if is_local(q):
        with q.open("a", encoding="utf-8") as f:
            f.write(text)
        return
    old = q.read_bytes() if q.exists() else b""
    q.write_bytes(old + text.encode("utf-8"))


def remove(p: PathLike) -> None:
    path(p).unlink()


def move(src: PathLike, dst: PathLike) -> None:
    """Move a file or a directory tree (object stores: copy then delete, file by file)."""
    s, d = path(src), path(dst)
    if is_local(s) and is_local(d):
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(os.fspath(s), os.fspath(d))  # a rename, or a copy across devices
        return
    if not s.is_dir():
        d.parent.mkdir(parents=True, exist_ok=True)
        d.write_bytes(s.read_bytes())
        s.unlink()
        return
    for f in list(walk_files(s)):
        rel = os.fspath(f)[len(os.fspath(s)):].lstrip("/")
        target = d / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path(f).read_bytes())
    s.rmtree()
