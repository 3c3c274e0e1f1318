"""GLUE's zips on 127.0.0.1 for tests (no network): `GET /NAME.zip` answers the bytes given,
any other path 404. Standard library only, so the Colab rehearsal (tools/colab/rehearse.py)
serves it before bert_jax is installed."""

from __future__ import annotations

import http.server
import io
import threading
import zipfile


def glue_zip(folder: str, files: dict[str, str]) -> bytes:
    """A zip as GLUE publishes one: FOLDER/train.tsv, FOLDER/dev.tsv, ..."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, text in files.items():
            z.writestr(f"{folder}/{name}", text)
    return out.getvalue()


def sst2_files(count: int = 32) -> dict[str, str]:
    """train/dev/test.tsv of SST-2's layout: `count` training sentences, half that for dev
    and test, labelled by their adjective (so a model can learn them)."""
    good, bad = ["wonderful", "gripping", "moving", "funny"], ["dull", "lifeless", "long", "flat"]
    def rows(n, offset):
        return [(f"a {(good if i % 2 else bad)[i % 4]} film about the sea {i + offset}",
                 i % 2) for i in range(n)]
    train, dev, test = rows(count, 0), rows(count // 2, 1000), rows(count // 2, 2000)
    return {"train.tsv": "sentence\tlabel\n" + "".join(f"{s} \t{y}\n" for s, y in train),
            "dev.tsv": "sentence\tlabel\n" + "".join(f"{s} \t{y}\n" for s, y in dev),
            "test.tsv": "index\tsentence\n" + "".join(f"{i}\t{s}\n"
                                                     for i, (s, _) in enumerate(test))}


class GlueServer:
    def __init__(self, zips: dict[str, bytes]):
        self.zips, self.requests = zips, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append(self.path)
                data = server.zips.get(self.path.lstrip("/"))
                self.send_response(200 if data is not None else 404)
                self.send_header("Content-Length", str(len(data or b"")))
                self.end_headers()
                self.wfile.write(data or b"")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def notebook_glue() -> GlueServer:
    """SST-2.zip for the quickstart notebook's smoke mode (tests/project/test_notebook.py and
    the Colab rehearsal)."""
    return GlueServer({"SST-2.zip": glue_zip("SST-2", sst2_files())})
