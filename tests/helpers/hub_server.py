"""A Hugging Face Hub on 127.0.0.1 for tests (no network): the routes huggingface_hub
calls to download a model, as its source (file_download.py, hf_api.py, utils/_http.py)
reads them:

  GET  /api/models/REPO/revision/REV   model info: {"id", "sha", "siblings": [{"rfilename"}]}
  HEAD /REPO/resolve/REV/FILE          X-Repo-Commit, ETag, Content-Length
  GET  /REPO/resolve/REV/FILE          the bytes

`bert_files()` writes a small random BERT as the Hub holds one (numpy and safetensors only,
so a harness can serve it where bert_jax is not installed yet: the Colab rehearsal).

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

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def bert_files(seed: int = 0, hidden: int = 16, layers: int = 2, vocab_size: int = 64,
               words: tuple[str, ...] = ()) -> dict[str, bytes]:
    """config.json, model.safetensors (BertForPreTraining's tensors, random), vocab.txt and
    tokenizer_config.json of a small uncased BERT."""
    import numpy as np
    from safetensors.numpy import save

    rng, inter = np.random.default_rng(seed), 2 * hidden
    shapes = {"bert.embeddings.word_embeddings.weight": (vocab_size, hidden),
              "bert.embeddings.position_embeddings.weight": (64, hidden),
              "bert.embeddings.token_type_embeddings.weight": (2, hidden),
              "bert.pooler.dense.weight": (hidden, hidden),
              "cls.predictions.transform.dense.weight": (hidden, hidden),
              "cls.seq_relationship.weight": (2, hidden)}
    for i in range(layers):
        block = f"bert.encoder.layer.{i}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"):
            shapes[block + name + ".weight"] = (hidden, hidden)
        shapes[block + "intermediate.dense.weight"] = (inter, hidden)
        shapes[block + "output.dense.weight"] = (hidden, inter)
    state = {k: rng.normal(0, 0.02, v).astype(np.float32) for k, v in shapes.items()}
    for name, size in [(k[:-len(".weight")], v[0]) for k, v in shapes.items()
                       if "embeddings" not in k] + [("cls.predictions", vocab_size)]:
        state[name + ".bias"] = np.zeros(size, np.float32)
    for norm in ["bert.embeddings.LayerNorm", "cls.predictions.transform.LayerNorm"] + [
            f"bert.encoder.layer.{i}.{part}.LayerNorm" for i in range(layers)
            for part in ("attention.output", "output")]:
        state[norm + ".weight"] = np.ones(hidden, np.float32)
        state[norm + ".bias"] = np.zeros(hidden, np.float32)
    config = {"architectures": ["BertForPreTraining"], "model_type": "bert",
              "vocab_size": vocab_size, "hidden_size": hidden, "num_hidden_layers": layers,
              "num_attention_heads": 2, "intermediate_size": inter, "hidden_act": "gelu",
              "max_position_embeddings": 64, "type_vocab_size": 2, "hidden_dropout_prob": 0.1,
              "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
              "layer_norm_eps": 1e-12}
    vocab = SPECIALS + list(words)
    vocab += [f"w{i}" for i in range(vocab_size - len(vocab))]
    return {"config.json": json.dumps(config).encode(),
            "model.safetensors": save(state, metadata={"format": "pt"}),
            "vocab.txt": ("\n".join(vocab) + "\n").encode(),
            "tokenizer_config.json": b'{"do_lower_case": true}'}


NOTEBOOK_MODEL = "google/bert_uncased_L-2_H-128_A-2"  # notebooks/colab_quickstart.ipynb's


def notebook_hub() -> "HubServer":
    """The quickstart notebook's model by name, served as a small random BERT (for
    tests/project/test_notebook.py and the Colab rehearsal, tools/colab/rehearse.py)."""
    commit = "0" * 40
    return HubServer({NOTEBOOK_MODEL: Repo({commit: bert_files()}, {"main": commit})})


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
