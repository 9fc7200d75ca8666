"""posjax.storage on a local path and on gs:// (fsspec's in-memory filesystem registered for
the scheme, as tests/storage/fake_gcs.py does; no TensorStore here): the same calls, the same
results; and the one-line errors for filesystems this machine cannot reach."""

import fsspec
import pytest
from fsspec.registry import _registry

from posjax import storage
from posjax.errors import ConfigError
from tests.storage.fake_gcs import MemoryGcs


@pytest.fixture
def gcs():
    saved = {k: _registry.get(k) for k in ("gs", "gcs")}
    fsspec.register_implementation("gs", MemoryGcs, clobber=True)
    fsspec.register_implementation("gcs", MemoryGcs, clobber=True)
    MemoryGcs.store.clear()
    yield "gs://unit-bucket/run"
    MemoryGcs.store.clear()
    for k, v in saved.items():
        if v is None:
            _registry.pop(k, None)
        else:
            _registry[k] = v


@pytest.fixture(params=["local", "gs"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "run")
    return request.getfixturevalue("gcs")


def test_the_same_calls_on_local_and_gs(root):
    assert not storage.exists(root) and storage.listdir(root) == []
    storage.write_text(storage.join(root, "config.json"), "{}\n")
    storage.append_text(storage.join(root, "metrics.jsonl"), "a\n")
    storage.append_text(storage.join(root, "metrics.jsonl"), "b\n")
    storage.write_bytes(storage.join(root, "ck", "1", "state", "x"), b"12345")
    assert storage.read_text(storage.join(root, "metrics.jsonl")) == "a\nb\n"
    assert storage.listdir(root) == ["ck", "config.json", "metrics.jsonl"]  # no temporary files
    assert storage.isfile(storage.join(root, "config.json"))
    assert storage.isdir(storage.join(root, "ck", "1"))
    assert storage.size(storage.join(root, "ck", "1", "state", "x")) == 5
    assert list(storage.walk_files(storage.join(root, "ck"))) == [
        storage.join(root, "ck", "1", "state", "x")]
    storage.move(storage.join(root, "ck", "1"), storage.join(root, "aside", "1-0"))
    assert not storage.exists(storage.join(root, "ck", "1"))
    assert storage.read_bytes(storage.join(root, "aside", "1-0", "state", "x")) == b"12345"
    storage.remove(storage.join(root, "config.json"))
    assert not storage.exists(storage.join(root, "config.json"))


def test_paths():
    assert storage.join("gs://b/run", "tb") == "gs://b/run/tb"
    assert storage.is_local("relative/dir") and not storage.is_local("gs://b/x")
    assert storage.join("relative").startswith("/")  # local paths are made absolute


@pytest.mark.skipif(storage._installed("gcsfs"), reason="gcsfs is installed here")
def test_unreachable_filesystems_are_one_line_errors():
    with pytest.raises(ConfigError, match=r"pip install gcsfs google-cloud-storage"):
        storage.check_filesystem("gs://b/x")
    with pytest.raises(ConfigError, match=r"a local path or a gs://"):
        storage.check_filesystem("ftp://host/x", "out")
