"""An in-process, in-memory stand-in for Cloud Storage, reached the two ways a gs:// workdir is:

- fsspec (what etils.epath uses for gs://, so posjax.storage and orbax's directory work):
  `MemoryGcs`, fsspec's in-memory filesystem registered under the `gs`/`gcs` protocols;
- TensorStore's own GCS driver (what orbax writes the arrays with): a small HTTP server
  speaking the part of the GCS JSON API that driver uses (media get / upload / delete /
  list, generations and preconditions), serving the same objects. TensorStore is pointed at
  it with TENSORSTORE_GCS_HTTP_URL and a fixed token (GOOGLE_AUTH_TOKEN_FOR_TESTING).

Nothing touches the local disk or the network. Test-only: production gs:// uses gcsfs.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlparse

import fsspec
from fsspec.implementations.memory import MemoryFileSystem


class MemoryGcs(MemoryFileSystem):
    """fsspec memory filesystem for gs:// paths ('gs://b/x' is stored as '/b/x')."""

    protocol = ("gs", "gcs")
    store: dict = {}  # its own store, not memory://'s
    pseudo_dirs = [""]

    @classmethod
    def _strip_protocol(cls, path):
        path = str(path)
        for p in ("gs://", "gcs://"):
            if path.startswith(p):
                path = path[len(p):]
        return super()._strip_protocol(path)

    def __init__(self, *args, finalize_on_close=None, **kwargs):  # gcsfs's option, meaningless here
        super().__init__(*args, **kwargs)


_GEN = itertools.count(1)
_GENS: dict = {}  # key -> (file object, generation): a rewritten object gets a new generation
_LOCK = threading.Lock()


def _generation(key: str):
    f = MemoryGcs.store.get(key)
    if f is None:
        return None
    with _LOCK:
        held = _GENS.get(key)
        if held is None or held[0] is not f:
            held = (f, next(_GEN))
            _GENS[key] = held
        return held[1]


def _meta(bucket: str, name: str) -> dict:
    key = f"/{bucket}/{name}"
    gen = _generation(key)
    return {"kind": "storage#object", "bucket": bucket, "name": name,
            "size": str(MemoryGcs.store[key].size), "generation": str(gen), "metageneration": "1"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: bytes = b"", headers: dict | None = None):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, obj: dict, headers: dict | None = None):
        self._send(code, json.dumps(obj).encode(), {"Content-Type": "application/json",
                                                    **(headers or {})})

    def _precondition(self, q: dict, key: str) -> int | None:
        gen = _generation(key) or 0
        if "ifGenerationMatch" in q and int(q["ifGenerationMatch"][0]) != gen:
            return 412
        if "ifGenerationNotMatch" in q and int(q["ifGenerationNotMatch"][0]) == gen:
            return 304
        return None

    def _route(self):
        u = urlparse(self.path)
        q = parse_qs(u.query)
        m = re.match(r"^/(upload/)?storage/v1/b/([^/]+)/o(?:/(.+))?$", u.path)
        if not m:
            return None, None, None, q
        upload, bucket, obj = m.group(1), m.group(2), m.group(3)
        return upload, bucket, unquote(obj) if obj else None, q

    def do_GET(self):
        upload, bucket, name, q = self._route()
        if bucket is None:
            return self._send(404)
        if name is None:
            return self._list(bucket, q)
        key = f"/{bucket}/{name}"
        if key not in MemoryGcs.store:
            return self._json(404, {"error": {"code": 404, "message": "No such object"}})
        code = self._precondition(q, key)
        if code:
            return self._send(code)
        gen = _generation(key)
        if q.get("alt", [""])[0] != "media":
            return self._json(200, _meta(bucket, name))
        data = bytes(MemoryGcs.store[key].getbuffer())
        headers = {"x-goog-generation": str(gen), "Content-Type": "application/octet-stream"}
        rng = self.headers.get("Range")
        if rng:
            a, _, b = rng.split("=", 1)[1].partition("-")
            start = int(a)
            end = int(b) + 1 if b else len(data)
            part = data[start:end]
            headers["Content-Range"] = f"bytes {start}-{start + len(part) - 1}/{len(data)}"
            return self._send(206, part, headers)
        return self._send(200, data, headers)

    do_HEAD = do_GET

    def _list(self, bucket: str, q: dict):
        prefix = f"/{bucket}/" + q.get("prefix", [""])[0]
        start = q.get("startOffset", [""])[0]
        end = q.get("endOffset", [""])[0]
        items = []
        for key in sorted(MemoryGcs.store):
            if not key.startswith(prefix):
                continue
            name = key[len(bucket) + 2:]
            if (start and name < start) or (end and name >= end):
                continue
            items.append(_meta(bucket, name))
        return self._json(200, {"kind": "storage#objects", "items": items})

    def do_POST(self):
        upload, bucket, _, q = self._route()
        if not upload or bucket is None:
            return self._send(404)
        name = q["name"][0]
        key = f"/{bucket}/{name}"
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        code = self._precondition(q, key)
        if code:
            return self._json(412, {"error": {"code": 412, "message": "Precondition Failed"}})
        MemoryGcs().pipe_file(key, body)
        return self._json(200, _meta(bucket, name))

    def do_DELETE(self):
        _, bucket, name, q = self._route()
        key = f"/{bucket}/{name}"
        if key not in MemoryGcs.store:
            return self._json(404, {"error": {"code": 404, "message": "No such object"}})
        code = self._precondition(q, key)
        if code:
            return self._json(412, {"error": {"code": 412, "message": "Precondition Failed"}})
        del MemoryGcs.store[key]
        return self._send(204)


class _Bucket:
    hierarchical_namespace_enabled = False


class _StorageClient:
    """What orbax asks google.cloud.storage (is the bucket's namespace hierarchical?)."""

    def get_bucket(self, name):
        del name
        return _Bucket()


def _install_storage_client() -> None:
    import google.cloud

    module = types.ModuleType("google.cloud.storage")
    module.Client = _StorageClient
    sys.modules["google.cloud.storage"] = module
    google.cloud.storage = module


def start() -> ThreadingHTTPServer:
    """Register MemoryGcs with fsspec, start the server and point TensorStore at it; answer
    orbax's one google-cloud-storage question (google-cloud-storage is not installed here)."""
    _install_storage_client()
    fsspec.register_implementation("gs", MemoryGcs, clobber=True)
    fsspec.register_implementation("gcs", MemoryGcs, clobber=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ["TENSORSTORE_GCS_HTTP_URL"] = f"http://127.0.0.1:{server.server_address[1]}"
    os.environ["GOOGLE_AUTH_TOKEN_FOR_TESTING"] = "fake-token"
    return server


def files(bucket: str) -> list[str]:
    """gs:// paths of every object in `bucket`."""
    return sorted("gs://" + k.lstrip("/") for k in MemoryGcs.store if k.startswith(f"/{bucket}/"))


__all__ = ["MemoryGcs", "start", "files", "quote"]
