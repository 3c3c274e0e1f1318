"""A Hugging Face Hub on 127.0.0.1 for tests (no network): the routes huggingface_hub
calls to download a model, as its source (file_download.py, hf_api.py, utils/_http.py)
reads them:

  GET  /api/models/REPO/revision/REV   model info: {"id", "sha", "siblings": [{"rfilename"}]}
  HEAD /REPO/resolve/REV/FILE          X-Repo-Commit, ETag, Content-Length
  GET  /REPO/resolve/REV/FILE          the bytes

Errors carry the Hub's X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound), which
huggingface_hub turns into its error types. A private repo answers only a request with
`Authorization: Bearer TOKEN`. Every request is recorded in `requests` as (method, path).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import urllib.parse


class Repo:
    def __init__(self, commits: dict[str, dict[str, bytes]], branches: dict[str, str],
                 token: str | None = None):
        self.commits, self.branches, self.token = commits, branches, token

    def commit(self, revision: str) -> str | None:
        return self.branches.get(revision) or (revision if revision in self.commits else None)


class HubServer:
    def __init__(self, repos: dict[str, Repo]):
        self.repos, self.requests = repos, []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub._answer(self, body=False)

            def do_GET(self):
                hub._answer(self, body=True)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def _route(self, path: str):
        """(repo, revision, filename or None for the model info API)."""
        path = urllib.parse.unquote(urllib.parse.urlsplit(path).path)
        if path.startswith("/api/models/"):
            repo, _, revision = path[len("/api/models/"):].partition("/revision/")
            return repo, revision or "main", None
        repo, _, rest = path.lstrip("/").partition("/resolve/")
        revision, _, filename = rest.partition("/")
        return repo, revision, filename

    def _answer(self, handler, body: bool):
        self.requests.append((handler.command, handler.path))
        repo_id, revision, filename = self._route(handler.path)
        repo = self.repos.get(repo_id)
        if repo is None or (repo.token and handler.headers.get("Authorization")
                            != f"Bearer {repo.token}"):
            return self._send(handler, 401, b"{}", {"X-Error-Code": "RepoNotFound"}, body)
        commit = repo.commit(revision)
        if commit is None:
            return self._send(handler, 404, b"{}", {"X-Error-Code": "RevisionNotFound"}, body)
        files = repo.commits[commit]
        if filename is None:
            info = {"id": repo_id, "sha": commit, "private": bool(repo.token),
                    "siblings": [{"rfilename": name} for name in sorted(files)]}
            return self._send(handler, 200, json.dumps(info).encode(), {}, body)
        if filename not in files:
            return self._send(handler, 404, b"{}", {"X-Error-Code": "EntryNotFound",
                                                    "X-Repo-Commit": commit}, body)
        data = files[filename]
        self._send(handler, 200, data, {"X-Repo-Commit": commit,
                                        "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}, body)

    @staticmethod
    def _send(handler, status: int, data: bytes, headers: dict[str, str], body: bool):
        handler.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(data))}.items():
            handler.send_header(key, value)
        handler.end_headers()
        if body:
            handler.wfile.write(data)
